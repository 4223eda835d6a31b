"""triangle in Triton: O_ijc = sum_k A_ikc B_jkc, read in place from the [N, N, C] layout. For each
channel c it is the matmul A[:, :, c] @ B[:, :, c]^T; a program takes an (i, j) tile of BLOCK_C
neighbouring channels (contiguous floats) and reduces over k, as one batched 3-d dot or, with
PER_CHANNEL, split in registers into one 2-d dot per channel.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import common, register_kernel

from .spec import SPEC


# <kernel>
@triton.jit
def _unpack(t, BLOCK_C: tl.constexpr):
    # [..., BLOCK_C] -> BLOCK_C tensors [...], channel 0 first (BLOCK_C is 2 or 4)
    if BLOCK_C == 2:
        t0, t1 = tl.split(t)
        return t0, t1, t0, t1
    else:
        even, odd = tl.split(tl.reshape(t, t.shape[:-1] + [2, 2]))  # c = 2p + q: q = 0, then q = 1
        t0, t2 = tl.split(even)
        t1, t3 = tl.split(odd)
        return t0, t1, t2, t3


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
    BLOCK_C: tl.constexpr,  # channels per program, contiguous in memory
    GROUP_I: tl.constexpr,  # tile rows walked before moving right (L2 reuse, as in matmul)
    PER_CHANNEL: tl.constexpr,  # BLOCK_C = 2 or 4 loaded together, then one 2-d dot per channel
    OFFS_64: tl.constexpr,  # an operand's element offsets pass 2^31: i and j indices in int64
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
    if OFFS_64:  # i and j times their strides (N * C each) would wrap in int32
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ks = tl.arange(0, BLOCK_K)
    # As in matmul, indices past the edge wrap (modulo) so only k needs a mask in the loop.
    if PER_CHANNEL:
        # a[i, k, c] = A[i, k, c] and b[k, j, c] = B[j, k, c]: each (i, k) is a run of BLOCK_C floats,
        # split in registers into BLOCK_C matrices, each fed to the 2-d dot that matmul uses.
        a_ptrs = A + (rows % N)[:, None, None] * sa_i + ks[None, :, None] * sa_k + (chans % C)[None, None, :] * sa_c
        b_ptrs = B + ks[:, None, None] * sb_k + (cols % N)[None, :, None] * sb_j + (chans % C)[None, None, :] * sb_c
        acc0 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        acc3 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        for k0 in range(0, N, BLOCK_K):
            kmask = ks < N - k0
            a0, a1, a2, a3 = _unpack(tl.load(a_ptrs, mask=kmask[None, :, None], other=0.0), BLOCK_C)
            b0, b1, b2, b3 = _unpack(tl.load(b_ptrs, mask=kmask[:, None, None], other=0.0), BLOCK_C)
            acc0 = tl.dot(a0, b0, acc0, input_precision="ieee")
            acc1 = tl.dot(a1, b1, acc1, input_precision="ieee")
            if BLOCK_C == 4:
                acc2 = tl.dot(a2, b2, acc2, input_precision="ieee")
                acc3 = tl.dot(a3, b3, acc3, input_precision="ieee")
            a_ptrs += BLOCK_K * sa_k
            b_ptrs += BLOCK_K * sb_k
        if BLOCK_C == 2:
            acc = tl.join(acc0, acc1)
        else:
            acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_I, BLOCK_J, BLOCK_C))
        mask = (rows < N)[:, None, None] & (cols < N)[None, :, None] & (chans < C)[None, None, :]
        tl.store(O + rows[:, None, None] * so_i + cols[None, :, None] * so_j + chans[None, None, :] * so_c,
                 acc, mask=mask)
    else:
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
FIRST = dict(BLOCK_I=32, BLOCK_J=32, BLOCK_K=32, BLOCK_C=1, GROUP_I=1, PER_CHANNEL=False, num_warps=4, num_stages=2)
SWEEP = [
    FIRST,
    dict(BLOCK_I=32, BLOCK_J=32, BLOCK_K=16, BLOCK_C=8, GROUP_I=8, PER_CHANNEL=False, num_warps=4, num_stages=3),
    dict(BLOCK_I=32, BLOCK_J=32, BLOCK_K=16, BLOCK_C=16, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=32, BLOCK_K=16, BLOCK_C=8, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=4, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=8, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=64, BLOCK_K=16, BLOCK_C=4, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=128, BLOCK_K=16, BLOCK_C=2, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=128, BLOCK_K=16, BLOCK_C=1, GROUP_I=8, PER_CHANNEL=False, num_warps=8, num_stages=3),
    # Not yet measured on a GPU: 2 or 4 neighbouring channels loaded as 8- or 16-byte runs, then the
    # 2-d FMA dot per channel (the 3-d dot above lowers to narrow shared-memory loads).
    dict(BLOCK_I=128, BLOCK_J=128, BLOCK_K=16, BLOCK_C=2, GROUP_I=8, PER_CHANNEL=True, num_warps=8, num_stages=3),
    dict(BLOCK_I=128, BLOCK_J=64, BLOCK_K=16, BLOCK_C=4, GROUP_I=8, PER_CHANNEL=True, num_warps=8, num_stages=3),
    dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=4, GROUP_I=8, PER_CHANNEL=True, num_warps=4, num_stages=3),
]
# The best kernel time of the recorded sweep (data/h200/tiles.csv; times in kernels/NOTES.md): large,
# one channel a program with 128 x 128 tiles (every batched config was slower, since Triton 3.6 lowers
# the FP32 3-d dot to FMAs with narrow shared-memory loads); field (N = 128, only 16 programs of
# 128 x 128), 32 x 32 tiles of 8 channels, which fill more SMs.
DEFAULTS = {"field": SWEEP[1], "large": SWEEP[8], "sweep": SWEEP[8]}


def triangle(A, B, out=None, **config):
    """O_ijc = sum_k A_ikc B_jkc for A, B of shape [N, N, C], any strides, no copies."""
    SPEC.validate(A, B)
    N, _, C = A.shape
    ops.check_out("triangle", out, (N, N, C), A.dtype, A.device)
    common.on_device("triangle", {"A": A, "B": B})
    out = torch.empty((N, N, C), dtype=A.dtype, device=A.device) if out is None else out
    if N == 0 or C == 0:
        return out
    consts, launch = common.split(common.choose("triangle", DEFAULTS, dict(N=N, C=C), config))
    if consts["PER_CHANNEL"] and consts["BLOCK_C"] not in (2, 4):
        raise MageInputError("triangle", "config", f"PER_CHANNEL needs BLOCK_C 2 or 4, got {consts['BLOCK_C']}")
    grid = (triton.cdiv(N, consts["BLOCK_I"]) * triton.cdiv(N, consts["BLOCK_J"]), triton.cdiv(C, consts["BLOCK_C"]))
    _triangle_kernel[grid](A, B, out, N, C, *A.stride(), *B.stride(), *out.stride(),
                           OFFS_64=common.offsets_64(A, B, out), **consts, **launch)
    return out


register_kernel("triangle", triangle, DEFAULTS, SWEEP)


@torch.library.custom_op("mage::triton_triangle", mutates_args=())
def triangle_op(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it."""
    return triangle(A, B)


@triangle_op.register_fake
def _(A, B):
    SPEC.validate(A, B)  # metadata only: a call with any 'meta' input lands here
    return A.new_empty(A.shape)
