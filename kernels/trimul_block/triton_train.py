"""The custom triangle update's training path, composed of the project's differentiable Triton operators,
cuBLAS GEMMs through torch and PyTorch's elementwise gates, so that autograd runs the project's backward
kernels (LayerNorm's and the triangle contraction's):

1. zn = LN(z): ``mage::triton_layernorm_train`` (backward: the Triton LayerNorm backward);
2. p = zn w_in + b_in: the five projections as one cuBLAS addmm, as in the forward block;
3. a, b = the sigmoid gates times the values times the mask: PyTorch elementwise ops (the forward block's
   gate kernel, which writes a and b channel-major for its batched GEMM, has no backward);
4. o_ijc = sum_k a_ikc b_jkc: ``mage::triton_triangle`` at 'fp32' (IEEE FMA, as the forward block's
   contraction), its backward two more triangle contractions on transposed views
   (kernels/triangle/triton_backward.py); one call per complex of a batch;
5. LN(o): the Triton LayerNorm again; the output projection as a cuBLAS addmm;
6. out = sigmoid(p[:, 4H:]) times it: PyTorch elementwise (the forward block's output-gate kernel has no
   backward either).

So the training step runs the triangle operator's own road (its in-place or channel-major kernels as
its config chooses), not the forward block's fused gate-and-transpose launch: what the project can
differentiate today.

Precisions: FP32 (IEEE FP32 GEMMs), and bf16 mixed precision following autocast as the MLP block's
path does: the two projections (forward and backward) in bf16 on the tensor cores, and both LayerNorms
on bf16 storage, forward and backward (z, and the contraction's FP32 o, rounded to bf16 as LN reads
them: the projection after each rounds its input to bf16 anyway; the kernels' sums and statistics FP32).
What stays FP32, and why: the gates and the contraction (the triangle's Triton operator trains at FP32
only: its bf16 precision is forward only, so its operands a and b are FP32 and the gates that make
them run in FP32 too), the output
gate and the output (the residual stream's dtype). The projections are N^2 C (5H + C) multiply-adds
and the contraction N^3 H: at the field shape (N = C = H = 128) the projections hold six times the
contraction's FLOPs, so bf16 speeds up most of the arithmetic, and the row measures that mixture.
"""
from __future__ import annotations

import torch

from kernels._pytorch import set_precision
from kernels.layernorm import triton_backward as _layernorm_bwd  # noqa: F401 - makes the operator differentiable
from kernels.mlp_block.triton_train import fp32, storage
from kernels.triangle import triton_backward as _triangle_bwd  # noqa: F401 - likewise
from mage.registry import declare

from .spec import NAME, SPEC


def _ln(x, gamma, beta):
    """LN(x) on the path's storage dtype: bf16 under a bf16 autocast (bf16 copies of the FP32 weights),
    else FP32."""
    act = storage(x.device)
    return torch.ops.mage.triton_layernorm_train(x.to(act), gamma.to(act), beta.to(act))[0]


@declare("train", NAME, "triton", "fp32", autocast=True)
def train(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out):
    """The custom block's training path on z [N, N, C] or a batch [B, N, N, C], differentiable in z,
    the mask and every weight."""
    SPEC.validate(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out)
    N, C, H = z.shape[-3], z.shape[-1], gamma_out.shape[0]
    B = z.shape[0] if z.dim() == 4 else 1
    R = B * N * N
    if not torch.is_autocast_enabled(z.device.type):
        set_precision("fp32")  # IEEE FP32 GEMMs whatever an earlier TF32 call left set
    p = fp32(torch.addmm(b_in, _ln(z.reshape(R, C), gamma_in, beta_in), w_in))  # [R, 4H + C]
    m = fp32(mask).reshape(R, 1)
    a = (torch.sigmoid(p[:, :H]) * p[:, H:2 * H] * m).view(B, N, N, H)
    b = (torch.sigmoid(p[:, 2 * H:3 * H]) * p[:, 3 * H:4 * H] * m).view(B, N, N, H)
    # the contraction never mixes complexes: one operator call each
    o = torch.stack([torch.ops.mage.triton_triangle(a[c], b[c], "fp32") for c in range(B)]) if N else a
    y = fp32(torch.addmm(b_out, _ln(o.reshape(R, H), gamma_out, beta_out), w_out))
    return (torch.sigmoid(p[:, 4 * H:]) * y).view(z.shape)
