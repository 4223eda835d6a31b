"""The custom MLP block: y = x + W2 gelu(W1 LN(x) + b1) + b2 assembled from the project's Triton kernels,
with cuBLAS kept for the two GEMMs. Five launches a call, in this order:

1. LN(x): the project's Triton LayerNorm (``kernels.layernorm``), one row a program.
2. a = LN(x) W1^T: cuBLAS (``torch.mm``). FP32 GEMMs here are IEEE FP32, and cuBLAS's SGEMM is the
   fastest FP32-accurate GEMM the project has measured at these sizes outside the fp32x3 road.
3. a = gelu(a + b1), in place: the project's Triton bias + GELU (``kernels.bias_gelu``). In place so the
   block allocates one [T, hidden] buffer, not two (at the large shape 256 MB, half the block's memory).
4. y = x + b2: one elementwise launch that writes the output buffer once, so that
5. y += a W2^T is cuBLAS's own epilogue: ``addmm_`` with beta = 1 reads y as its C operand, fusing the
   second bias and the residual into the GEMM at the price of one extra read of y ([T, d], small next
   to the GEMM's operands), with no [T, d] temporary for the GEMM's result.

Fusions this version does not do yet, and why: bias + GELU in the first GEMM's epilogue would save the
write and re-read of a ([T, hidden], the block's largest traffic after the weights) and a launch, and
b2 + residual in the second GEMM's epilogue would save launch 4; both need a Triton GEMM that matches
cuBLAS at FP32 accuracy (the fp32x3 road of ``kernels.matmul``), which is the next step. The block
runs at fp32 only for now: the project's Triton LayerNorm and bias + GELU accept fp32 only.
"""
from __future__ import annotations

import torch

from kernels._triton import ORDER, COLOR, LABEL, common
from kernels.bias_gelu.triton_kernel import bias_gelu
from kernels.layernorm.triton_kernel import layernorm
from mage import ops
from mage.errors import MageInputError
from mage.registry import register

from .spec import ARGS, NAME, SPEC

LAUNCHES = 5  # per call with T > 0 (the GPU test counts them)


def mlp_block(x, gamma, beta, W1, b1, W2, b2, out=None):
    """y = x + W2 gelu(W1 LN(x) + b1) + b2 with W1 [hidden, d] and W2 [d, hidden] (``Linear``'s layout)."""
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)
    if x.dtype != torch.float32:  # the spec accepts bf16; this block's kernels do not yet
        raise MageInputError(NAME, "x", f"must be float32 for the Triton block (its LayerNorm and bias + "
                                        f"GELU kernels are FP32 only), got {str(x.dtype).replace('torch.', '')}")
    T, d = x.shape
    ops.check_out(NAME, out, (T, d), x.dtype, x.device)
    # refused here, naming the block, before the LayerNorm launcher would refuse it naming itself
    common.on_device(NAME, dict(zip(ARGS, (x, gamma, beta, W1, b1, W2, b2))))
    # IEEE FP32 GEMMs whatever a TF32 row measured before this call left the switch at (the FP32
    # tolerance fails a TF32 product)
    torch.backends.cuda.matmul.allow_tf32 = False
    h = layernorm(x, gamma, beta)
    a = torch.mm(h, W1.t())  # B = W1^T: K-major, read in place (no copy) through cuBLAS's transpose flag
    bias_gelu(a, b1, out=a)
    y = torch.add(x, b2, out=out) if out is not None else torch.add(x, b2)
    return y.addmm_(a, W2.t())


register(NAME, "triton", dtype="fp32", family="triton", order=ORDER, label=LABEL, color=COLOR,
         interpret=True, needs_cuda=True,
         config={"ln": "triton", "gemm1": "cublas", "bias_gelu": "triton in place",
                 "gemm2": "cublas addmm, beta=1 over x + b2"})(mlp_block)


@torch.library.custom_op("mage::triton_mlp_block", mutates_args=())
def mlp_block_op(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor,
                 W2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """The block as a PyTorch operator, so torch.compile graphs can call it."""
    return mlp_block(x, gamma, beta, W1, b1, W2, b2)


@mlp_block_op.register_fake
def _(x, gamma, beta, W1, b1, W2, b2):
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)  # metadata only: a call with any 'meta' input lands here
    if x.dtype != torch.float32:
        raise MageInputError(NAME, "x", "must be float32 for the Triton block")
    return torch.empty_like(x)
