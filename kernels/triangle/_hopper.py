"""The channel-major contraction, O_c = A_c B_c^T for every channel c, on Hopper's tensor-memory loads and
warpgroup MMA: a persistent kernel whose operand tiles arrive by TMA (``_channel_major._batched_gemm_kernel``
loads them through pointers, one program a tile).

Why: at FP32 accuracy the triangle update's contraction is three TF32 products (tf32x3), 275 GFLOP at N = 1024
and H = 128; matmul's Hopper road (``kernels/matmul/triton_hopper``) runs the same product faster than the pointer
kernel does, and this is that road's main loop over a batch of channels. On an H100 at N = 1024 it took 2.86 ms
against the pointer kernel's 3.30 (96 against 83 TFLOP/s of useful work; kernels/NOTES.md).

The copies AT and BT [C, N, N] are seen as one [C N, N] matrix each: a tile of rows that runs past channel c's N
rows reads channel c + 1's, which only reach output rows past N, never stored; columns past N (k, and the last
channel's rows) arrive as zeros. TMA needs 16-byte rows, so N a multiple of 4 at FP32 (8 at bf16); other N take
the pointer kernel (``ready``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._triton.tiles import grouped_tile
from kernels.matmul.triton_hopper import available, programs  # the Hopper road's: sm_90 (or the interpreter), a
# program an SM


# <kernel>
@triton.jit
def _batched_tma_kernel(
    a_desc, b_desc,  # descriptors over AT and BT as [C N, N] (k contiguous), tiles [BLOCK_I, BLOCK_K] and
    # [BLOCK_J, BLOCK_K]
    O, N, C, so_i, so_j, so_c,  # as _channel_major._batched_gemm_kernel: the output and its (i, j, c) strides
    BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_I: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
):
    tiles_i = tl.cdiv(N, BLOCK_I)
    tiles_j = tl.cdiv(N, BLOCK_J)
    per_c = tiles_i * tiles_j
    # channel by channel (the slowest index), so the programs at work share a few channels' operands in L2
    for tile in tl.range(tl.program_id(0), per_c * C, NUM_PROGRAMS):
        c = tile // per_c
        tile_i, tile_j = grouped_tile(tile % per_c, tiles_i, tiles_j, GROUP_I)
        oi = tile_i * BLOCK_I
        oj = tile_j * BLOCK_J
        acc = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        for k0 in range(0, N, BLOCK_K):
            a = a_desc.load([c * N + oi, k0])
            b = b_desc.load([c * N + oj, k0])
            acc = tl.dot(a, b.T, acc, input_precision=PRECISION)  # B's tile K-major, transposed as a view
        rows = oi + tl.arange(0, BLOCK_I)
        cols = oj + tl.arange(0, BLOCK_J)
        cc = c
        if OFFS_64:
            rows = rows.to(tl.int64)
            cols = cols.to(tl.int64)
            cc = cc.to(tl.int64)
        mask = (rows < N)[:, None] & (cols < N)[None, :]
        tl.store(O + rows[:, None] * so_i + cols[None, :] * so_j + cc * so_c, acc, mask=mask)
# </kernel>


def ready(at: torch.Tensor, bt: torch.Tensor) -> bool:
    """Whether the copies [C, N, N] can be read by TMA here: contiguous, 16-byte rows and bases, on a card
    that has it."""
    N = at.shape[-1]
    return (available(at.device) and at.is_contiguous() and bt.is_contiguous()
            and (N * at.element_size()) % 16 == 0 and at.data_ptr() % 16 == 0 and bt.data_ptr() % 16 == 0)


def contract(at, bt, view, consts: dict, launch: dict, offs_64: bool) -> None:
    """view[i, j, c] = sum_k at[c, i, k] bt[c, j, k] (``view``: any strides over (i, j, c)); the caller checked
    ``ready``. ``consts``: BLOCK_I, BLOCK_J, BLOCK_K, GROUP_I and CONTRACT (the products' precision)."""
    C, N, _ = at.shape
    bi, bj, bk = consts["BLOCK_I"], consts["BLOCK_J"], consts["BLOCK_K"]
    a_desc = TensorDescriptor(at, [C * N, N], [N, 1], [bi, bk])
    b_desc = TensorDescriptor(bt, [C * N, N], [N, 1], [bj, bk])
    tiles = C * triton.cdiv(N, bi) * triton.cdiv(N, bj)
    n = programs(at.device, tiles)
    _batched_tma_kernel[(n,)](a_desc, b_desc, view, N, C, *view.stride(), BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk,
                              GROUP_I=consts["GROUP_I"], NUM_PROGRAMS=n, PRECISION=consts["CONTRACT"],
                              OFFS_64=offs_64, **launch)
