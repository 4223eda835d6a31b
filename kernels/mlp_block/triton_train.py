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
trainer's ``torch.autocast``, FP32 master weights): the path follows autocast and keeps the activations
of the memory-bound steps in bf16. The GEMMs, forward and backward, run in bf16 on the tensor cores as
autocast makes them. LayerNorm and bias + GELU run on bf16 storage, forward and backward: their input
is rounded to bf16 before LN (autocast's own LayerNorm would read the FP32 x and write FP32; the GEMM
after it rounds to bf16 anyway), gamma, beta and b1 are bf16 copies of the FP32 weights (their
gradients reach the weights through the casts' backward), and the kernels compute every sum and the
statistics in FP32 and round once at each store. What stays FP32, and why: the residual stream (x, the
sum x + the bf16 product, and the output, as PyTorch's eager block under autocast: a bf16 residual
would lose the small updates it accumulates), the saved LayerNorm statistics (8 bytes a row), the
partial column sums of db, dgamma and dbeta (the determinism scheme's buffers), and x's gradient where
it joins the residual's. Under an autocast to another dtype (float16) the Triton steps run in FP32 as
before: their kernels take FP32 or bf16 only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._pytorch import set_precision
from kernels.bias_gelu import triton_backward as _bias_gelu_bwd  # noqa: F401 - makes the operator differentiable
from kernels.layernorm import triton_backward as _layernorm_bwd  # noqa: F401 - likewise
from mage.registry import declare

from .spec import NAME, SPEC


def fp32(t: torch.Tensor) -> torch.Tensor:
    """t as FP32 (no copy when it is)."""
    return t if t.dtype == torch.float32 else t.float()


def storage(device: torch.device) -> torch.dtype:
    """The Triton steps' activation dtype: bf16 under a bf16 autocast, else FP32 (their kernels'
    two storage types)."""
    kind = device.type
    if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.bfloat16:
        return torch.bfloat16
    return torch.float32


def mlp(res, h_in, gamma, beta, W1, b1, W2, b2):
    """res + W2 gelu(W1 LN(h_in) + b1) + b2 through the differentiable operators (see the module
    docstring); the message-passing block's training path reuses it with h_in = the aggregation."""
    act = storage(h_in.device)  # .to() is no copy where a tensor already has it
    h = torch.ops.mage.triton_layernorm_train(h_in.to(act), gamma.to(act), beta.to(act))[0]
    amp = torch.is_autocast_enabled(h.device.type)
    if not amp:
        set_precision("fp32")  # IEEE FP32 GEMMs whatever an earlier TF32 call left set
    a = F.linear(h, W1)  # bf16 under autocast
    g = torch.ops.mage.triton_bias_gelu(a.to(act), b1.to(act))  # a.to: FP32 again under a float16 autocast
    if amp:
        # autocast's addmm would round the residual x + b2 to bf16; the product alone is bf16, the sum FP32
        return res + F.linear(g, W2, b2)
    return torch.addmm(res + b2, g, W2.t())  # beta = 1: the residual and b2 ride in cuBLAS's epilogue


@declare("train", NAME, "triton", "fp32", autocast=True)
def train(x, gamma, beta, W1, b1, W2, b2):
    """The custom block's training path, differentiable in x and every weight."""
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)
    return mlp(x, x, gamma, beta, W1, b1, W2, b2)
