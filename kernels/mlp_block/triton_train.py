"""The custom MLP block's training path: y = x + W2 gelu(W1 LN(x) + b1) + b2 composed of the project's
differentiable Triton operators and cuBLAS GEMMs through torch, so that autograd runs the project's
backward kernels:

1. LN(x): ``mage::triton_layernorm_train`` (the forward kernel with its statistics saved; backward:
   the Triton LayerNorm backward, dgamma and dbeta reduced in a fixed order);
2. a = LN(x) W1^T: cuBLAS (``F.linear``; its backward two more cuBLAS GEMMs);
3. g = gelu(a + b1): ``mage::triton_bias_gelu`` (backward: the Triton bias + GELU backward, db in a
   fixed order);
4. y = (x + b2) + g W2^T: cuBLAS's addmm with beta = 1, as the forward block's default road does.

What differs from the forward block (``triton_block.py``): bias + GELU writes a new buffer instead of
running in place (autograd must keep the pre-activation a for the backward), and the fused road (GEMMs
with the bias + GELU and the residual in a Triton epilogue) is not used: those GEMMs have no backward
yet, so the training step measures the unfused pieces the project can differentiate today.

Precisions. FP32: IEEE FP32 GEMMs (TF32 off, as in the forward block). bf16 mixed precision (the
trainer's ``torch.autocast``, FP32 master weights): the path follows autocast. The GEMMs, forward and
backward, run in bf16 on the tensor cores as autocast makes them; the Triton operators accept FP32
gradients only, so their inputs are FP32 (the GEMM's bf16 output is widened before bias + GELU) and
they compute and store in FP32, as autocast itself keeps LayerNorm in FP32. The residual sum and the
output are FP32 (x + a bf16 product, as PyTorch's eager block does under autocast). So at bf16 the
GEMMs (nearly all the FLOPs) are bf16 and the memory-bound steps move FP32 bytes: the bf16 row
measures that.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._pytorch import set_precision
from kernels.bias_gelu import triton_backward as _bias_gelu_bwd  # noqa: F401 - makes the operator differentiable
from kernels.layernorm import triton_backward as _layernorm_bwd  # noqa: F401 - likewise
from mage.registry import differentiable

from .spec import NAME, SPEC


def fp32(t: torch.Tensor) -> torch.Tensor:
    """t as FP32, what the Triton operators and their backward kernels take (no copy when it is)."""
    return t if t.dtype == torch.float32 else t.float()


def mlp(res, h_in, gamma, beta, W1, b1, W2, b2):
    """res + W2 gelu(W1 LN(h_in) + b1) + b2 through the differentiable operators (see the module
    docstring); the message-passing block's training path reuses it with h_in = the aggregation."""
    h = torch.ops.mage.triton_layernorm_train(fp32(h_in), fp32(gamma), fp32(beta))[0]
    amp = torch.is_autocast_enabled(h.device.type)
    if not amp:
        set_precision("fp32")  # IEEE FP32 GEMMs whatever an earlier TF32 call left set
    a = F.linear(h, W1)  # bf16 under autocast
    g = torch.ops.mage.triton_bias_gelu(fp32(a), fp32(b1))
    if amp:
        # autocast's addmm would round the residual x + b2 to bf16; the product alone is bf16, the sum FP32
        return res + F.linear(g, W2, b2)
    return torch.addmm(res + b2, g, W2.t())  # beta = 1: the residual and b2 ride in cuBLAS's epilogue


@differentiable(NAME, "triton", "fp32", autocast=True)
def train(x, gamma, beta, W1, b1, W2, b2):
    """The custom block's training path, differentiable in x and every weight."""
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)
    return mlp(x, x, gamma, beta, W1, b1, W2, b2)
