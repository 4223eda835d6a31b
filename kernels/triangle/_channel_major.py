"""triangle's channel-major road: copy A and B to [C, N, N] (one launch moves both), then one batched
GEMM, O_c = A_c @ B_c^T for every channel c, whose operands are both K-major (k contiguous), the
order the tensor cores' TF32 products read without re-staging. Its epilogue writes O in O's own
[N, N, C] layout, one of two ways (the config key STORE):

- "direct": the GEMM stores into O. With one channel a program (BLOCK_C = 1) a tile is a stride-C
  scatter, one 4-byte value per 32-byte sector; with BLOCK_C channels a program holds all of them and
  stores runs of BLOCK_C floats (8 fill a sector).
- "permute": the GEMM stores a channel-major scratch [C, N, N] in whole lines, then the transposing
  copy moves it into O: one more read and write of an output-sized tensor, and a third launch.

Scratch buffers come from PyTorch's allocator on every call (its cache makes that cheap), so two
calls in flight never share one, and their traffic is part of the measured time.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import common
from kernels._triton.tiles import grouped_tile

# The transposing copy's tile: 64 rows of k by 64 channels, 16 KB, read along c and written along k
# (or the reverse): each side moves 256-byte runs, and Triton turns the tile around in shared memory.
COPY_K, COPY_C, COPY_WARPS = 64, 64, 4


# <kernel>
@triton.jit
def _move(X, Y, i, ks, cs, mask, sx_i, sx_k, sx_c, sy_i, sy_k, sy_c):
    # one tile of an [N, N, C] view X into another view Y of the same shape, any strides
    x = tl.load(X + i * sx_i + ks[:, None] * sx_k + cs[None, :] * sx_c, mask=mask)
    tl.store(Y + i * sy_i + ks[:, None] * sy_k + cs[None, :] * sy_c, x, mask=mask)


@triton.jit
def _transpose_kernel(
    X0, Y0, X1, Y1,  # copy X0 into Y0 (program_id(2) == 0) and X1 into Y1 (== 1): one launch, two tensors
    N, C,  # every view is [N, N, C]
    sx0_i, sx0_k, sx0_c, sy0_i, sy0_k, sy0_c,  # strides of X0 and Y0 over (i, k, c)
    sx1_i, sx1_k, sx1_c, sy1_i, sy1_k, sy1_c,  # strides of X1 and Y1
    BLOCK_K: tl.constexpr,  # k values a program moves (one i)
    BLOCK_C: tl.constexpr,  # channels a program moves
    OFFS_64: tl.constexpr,  # offsets pass 2^31: indices in int64
):
    # a program takes one i, a run of k and a run of channels: the row index is a scalar, so no
    # element needs a division to find its (i, k)
    pid = tl.program_id(0)
    k_blocks = tl.cdiv(N, BLOCK_K)
    i = pid // k_blocks
    ks = (pid % k_blocks) * BLOCK_K + tl.arange(0, BLOCK_K)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (ks < N)[:, None] & (cs < C)[None, :]
    if OFFS_64:
        i = i.to(tl.int64)
        ks = ks.to(tl.int64)
        cs = cs.to(tl.int64)
    if tl.program_id(2) == 0:
        _move(X0, Y0, i, ks, cs, mask, sx0_i, sx0_k, sx0_c, sy0_i, sy0_k, sy0_c)
    else:
        _move(X1, Y1, i, ks, cs, mask, sx1_i, sx1_k, sx1_c, sy1_i, sy1_k, sy1_c)


@triton.jit
def _channel_dot(AT, BT, c, rows, cols, N, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr,
                 K_INNER: tl.constexpr, PRECISION: tl.constexpr):
    # A_c[rows] @ B_c[cols]^T over all k, from the channel-major copies AT and BT: [C, N(i or j), N(k)]
    # with K_INNER, else [C, N(k), N(i or j)]. Rows and columns past the edge wrap (modulo) so only k
    # needs a mask, as in matmul.
    ks = tl.arange(0, BLOCK_K)
    if K_INNER:
        a_ptrs = AT + c * N * N + (rows % N)[:, None] * N + ks[None, :]
        b_ptrs = BT + c * N * N + ks[:, None] + (cols % N)[None, :] * N
        step = BLOCK_K
    else:
        a_ptrs = AT + c * N * N + ks[None, :] * N + (rows % N)[:, None]
        b_ptrs = BT + c * N * N + ks[:, None] * N + (cols % N)[None, :]
        step = BLOCK_K * N
    acc = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
    for k0 in range(0, N, BLOCK_K):
        kmask = ks < N - k0
        a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += step
        b_ptrs += step
    return acc


@triton.jit
def _batched_gemm_kernel(
    AT, BT, O,  # AT, BT: [C, N, N] channel-major copies of A and B; O: the output, any strides
    N, C,
    so_i, so_j, so_c,  # O's strides over (i, j, c): O itself, or a channel-major scratch
    BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_C: tl.constexpr,  # channels a program computes, one after another, and stores together
    GROUP_I: tl.constexpr,  # tile rows walked before moving right, within one channel
    K_INNER: tl.constexpr,  # the copies hold k innermost (tensor cores) or i and j innermost (FMA dot)
    PRECISION: tl.constexpr,  # "ieee" (FMA) or "tf32x3" (three TF32 tensor-core products)
    OFFS_64: tl.constexpr,
):
    # Programs run channel group by channel group (the group is the slowest index), so the programs
    # resident at once read the operands of a few channels, which stay in L2 while all their tiles run.
    pid = tl.program_id(0)
    tiles_i = tl.cdiv(N, BLOCK_I)
    tiles_j = tl.cdiv(N, BLOCK_J)
    c0 = (pid // (tiles_i * tiles_j)) * BLOCK_C
    t = pid % (tiles_i * tiles_j)
    tile_i, tile_j = grouped_tile(t, tiles_i, tiles_j, GROUP_I)
    rows = tile_i * BLOCK_I + tl.arange(0, BLOCK_I)
    cols = tile_j * BLOCK_J + tl.arange(0, BLOCK_J)
    if OFFS_64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
        c0 = c0.to(tl.int64)
    tile_mask = (rows < N)[:, None] & (cols < N)[None, :]
    if BLOCK_C == 1:
        acc = _channel_dot(AT, BT, c0, rows, cols, N, BLOCK_I, BLOCK_J, BLOCK_K, K_INNER, PRECISION)
        tl.store(O + rows[:, None] * so_i + cols[None, :] * so_j + c0 * so_c, acc, mask=tile_mask)
    else:
        # Each channel's tile is computed alone (one accumulator, the pipeline's shared memory sized
        # for one channel), then placed in its slot of the [BLOCK_I, BLOCK_J, BLOCK_C] result, whose
        # store writes BLOCK_C neighbouring floats of O at each (i, j).
        slot = tl.arange(0, BLOCK_C)
        res = tl.zeros((BLOCK_I, BLOCK_J, BLOCK_C), dtype=tl.float32)
        for cc in tl.static_range(BLOCK_C):
            if c0 + cc < C:  # the last group may hold fewer channels: no work for the missing ones
                acc = _channel_dot(AT, BT, c0 + cc, rows, cols, N, BLOCK_I, BLOCK_J, BLOCK_K, K_INNER, PRECISION)
                res = tl.where(slot[None, None, :] == cc, acc[:, :, None], res)
        chans = c0 + slot
        tl.store(O + rows[:, None, None] * so_i + cols[None, :, None] * so_j + chans[None, None, :] * so_c,
                 res, mask=tile_mask[:, :, None] & (chans < C)[None, None, :])
# </kernel>


def transpose(pairs, N: int, C: int, offs_64: bool) -> None:
    """Copy each (X, Y) pair of [N, N, C] views, X into Y (one or two pairs, one launch)."""
    (x0, y0), (x1, y1) = pairs[0], pairs[-1]
    grid = (N * common.cdiv(N, COPY_K), common.cdiv(C, COPY_C), len(pairs))
    _transpose_kernel[grid](x0, y0, x1, y1, N, C, *x0.stride(), *y0.stride(), *x1.stride(), *y1.stride(),
                            BLOCK_K=COPY_K, BLOCK_C=COPY_C, OFFS_64=offs_64, num_warps=COPY_WARPS)


def channel_major(A, B, out, consts: dict, launch: dict, precision: str, offs_64: bool):
    """O = the triangle contraction of A and B into ``out`` by the channel-major road."""
    N, _, C = A.shape
    at = torch.empty((C, N, N), dtype=A.dtype, device=A.device)
    bt = torch.empty((C, N, N), dtype=A.dtype, device=A.device)
    if consts["K_INNER"]:
        # at[c, i, k] = A[i, k, c]: seen as an [N, N, C] view (strides (N, 1, N^2)), the copy walks
        # runs of k, which are contiguous on both sides' inner index
        pairs = [(A, at.permute(1, 2, 0)), (B, bt.permute(1, 2, 0))]
    else:
        # at[c, k, i] = A[i, k, c]: the copy walks runs of i instead (views with i and k swapped), so
        # its writes stay contiguous
        pairs = [(A.transpose(0, 1), at.permute(1, 2, 0)), (B.transpose(0, 1), bt.permute(1, 2, 0))]
    transpose(pairs, N, C, offs_64)
    direct = consts["STORE"] == "direct"
    scratch = None if direct else torch.empty((C, N, N), dtype=A.dtype, device=A.device)
    view = out if direct else scratch.permute(1, 2, 0)  # (i, j, c) strides either way
    bc = consts["BLOCK_C"]
    grid = (common.cdiv(N, consts["BLOCK_I"]) * common.cdiv(N, consts["BLOCK_J"]) * common.cdiv(C, bc),)
    _batched_gemm_kernel[grid](at, bt, view, N, C, *view.stride(),
                               BLOCK_I=consts["BLOCK_I"], BLOCK_J=consts["BLOCK_J"], BLOCK_K=consts["BLOCK_K"],
                               BLOCK_C=bc, GROUP_I=consts["GROUP_I"], K_INNER=consts["K_INNER"],
                               PRECISION=precision, OFFS_64=offs_64, **launch)
    if not direct:
        transpose([(view, out)], N, C, offs_64)
    return out
