"""triangle in Triton: O_ijc = sum_k A_ikc B_jkc, read in place from the [N, N, C] layout. For each
channel c it is the matmul A[:, :, c] @ B[:, :, c]^T; a program takes an (i, j) tile for BLOCK_C
neighbouring channels at once, so every load is a run of BLOCK_C contiguous floats, and reduces over k.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.registry import register

from . import common


# <kernel>
@triton.jit
def _triangle_kernel(
    A, B, O,  # pointers to A, B and the output O, all [N, N, C]
    N, C,  # nodes and channels
    sa_i, sa_k, sa_c,  # A's strides over (i, k, c)
    sb_j, sb_k, sb_c,  # B's strides over (j, k, c)
    so_i, so_j, so_c,  # O's strides over (i, j, c)
    BLOCK_I: tl.constexpr,  # output tile rows (i)
    BLOCK_J: tl.constexpr,  # output tile columns (j)
    BLOCK_K: tl.constexpr,  # depth of one step of the k loop
    BLOCK_C: tl.constexpr,  # channels per program: the batch of the 3-d dot, contiguous in memory
    GROUP_I: tl.constexpr,  # tile rows walked before moving right (L2 reuse, as in matmul)
):
    pid = tl.program_id(0)
    tiles_i = tl.cdiv(N, BLOCK_I)
    tiles_j = tl.cdiv(N, BLOCK_J)
    per_group = GROUP_I * tiles_j
    first_i = (pid // per_group) * GROUP_I
    group_i = min(tiles_i - first_i, GROUP_I)
    tile_i = first_i + (pid % per_group) % group_i
    tile_j = (pid % per_group) // group_i
    rows = tile_i * BLOCK_I + tl.arange(0, BLOCK_I)
    cols = tile_j * BLOCK_J + tl.arange(0, BLOCK_J)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ks = tl.arange(0, BLOCK_K)
    # As in matmul, indices past the edge wrap (modulo) so only k needs a mask in the loop.
    # a[c, i, k] = A[i, k, c] and b[c, k, j] = B[j, k, c]: a batch of BLOCK_C matrix products.
    a_ptrs = A + (chans % C)[:, None, None] * sa_c + (rows % N)[None, :, None] * sa_i + ks[None, None, :] * sa_k
    b_ptrs = B + (chans % C)[:, None, None] * sb_c + ks[None, :, None] * sb_k + (cols % N)[None, None, :] * sb_j
    acc = tl.zeros((BLOCK_C, BLOCK_I, BLOCK_J), dtype=tl.float32)
    for k0 in range(0, N, BLOCK_K):
        kmask = ks < N - k0
        a = tl.load(a_ptrs, mask=kmask[None, None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[None, :, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * sa_k
        b_ptrs += BLOCK_K * sb_k
    mask = (chans < C)[:, None, None] & (rows < N)[None, :, None] & (cols < N)[None, None, :]
    tl.store(O + chans[:, None, None] * so_c + rows[None, :, None] * so_i + cols[None, None, :] * so_j,
             acc, mask=mask)
# </kernel>


# FIRST: one channel per program, the "C independent matmuls" read literally; every load is a
# single float C apart, so each 32-byte sector fetched serves one value.
FIRST = dict(BLOCK_I=32, BLOCK_J=32, BLOCK_K=32, BLOCK_C=1, GROUP_I=1, num_warps=4, num_stages=2)
SWEEP = [
    FIRST,
    dict(BLOCK_I=32, BLOCK_J=32, BLOCK_K=16, BLOCK_C=8, GROUP_I=8, num_warps=4, num_stages=3),
    dict(BLOCK_I=32, BLOCK_J=32, BLOCK_K=16, BLOCK_C=16, GROUP_I=8, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=32, BLOCK_K=16, BLOCK_C=8, GROUP_I=8, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=4, GROUP_I=8, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=8, GROUP_I=8, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=64, BLOCK_K=16, BLOCK_C=4, GROUP_I=8, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=128, BLOCK_K=16, BLOCK_C=2, GROUP_I=8, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=128, BLOCK_K=16, BLOCK_C=1, GROUP_I=8, num_warps=8, num_stages=3),
]
# From the development run of 2026-12-02 on the H200 (kernels/NOTES.md): one channel a program with
# 128x128 tiles was best at both shapes (1615 us at N=384, C=128); every batched (BLOCK_C > 1) config
# was slower, since Triton 3.6 lowers the FP32 3-d dot to FMAs with narrow shared-memory loads.
DEFAULTS = {"field": SWEEP[8], "large": SWEEP[8], "sweep": SWEEP[8]}


def triangle(A, B, out=None, **config):
    """O_ijc = sum_k A_ikc B_jkc for A, B of shape [N, N, C], any strides, no copies."""
    ops.OPS["triangle"].validate(A, B)
    N, _, C = A.shape
    ops.check_out("triangle", out, (N, N, C), A.dtype, A.device)
    out = torch.empty((N, N, C), dtype=A.dtype, device=A.device) if out is None else out
    if N == 0 or C == 0:
        return out
    consts, launch = common.split(common.choose("triangle", DEFAULTS, dict(N=N, C=C), config))
    grid = (triton.cdiv(N, consts["BLOCK_I"]) * triton.cdiv(N, consts["BLOCK_J"]), triton.cdiv(C, consts["BLOCK_C"]))
    _triangle_kernel[grid](A, B, out, N, C, *A.stride(), *B.stride(), *out.stride(), **consts, **launch)
    return out


def reuse(config: dict) -> dict:
    """Per k step of one program: distinct inputs loaded, multiply-adds, and their ratio."""
    bi, bj, bk, bc = config["BLOCK_I"], config["BLOCK_J"], config["BLOCK_K"], config["BLOCK_C"]
    loads, fmas = bc * (bi * bk + bk * bj), bc * bi * bj * bk
    return dict(loads=loads, fmas=fmas, fmas_per_load=fmas / loads)


register("triangle", "triton", family="triton", interpret=True, needs_cuda=True,
         config=DEFAULTS)(lambda A, B, out=None: triangle(A, B, out=out))


@torch.library.custom_op("mage::triton_triangle", mutates_args=())
def triangle_op(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it."""
    return triangle(A, B)


@triangle_op.register_fake
def _(A, B):
    return A.new_empty(A.shape)
