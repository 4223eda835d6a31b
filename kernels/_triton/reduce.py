"""Deterministic column sums of a buffer of partial sums, shared by the backward passes that reduce a
gradient over rows (bias_gelu's db, layernorm's dgamma and dbeta).

Each forward-sized pass writes one row of partial sums per program; this kernel adds those rows in row
order, so the result is the same bits on every run (no atomics, whose order the scheduler picks).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import common


# <kernel>
@triton.jit
def _column_sum_kernel(Part, Out, n, C, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
    # Out[c] = sum over the n rows of Part[:, c], BLOCK_N rows a step in row order, then one fixed tree
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    acc = tl.zeros((BLOCK_N, BLOCK_C), dtype=tl.float32)
    for n0 in range(0, n, BLOCK_N):
        rows = n0 + tl.arange(0, BLOCK_N)
        acc += tl.load(Part + rows.to(tl.int64)[:, None] * C + cols[None, :],
                       mask=(rows < n)[:, None] & cmask[None, :], other=0.0)
    tl.store(Out + cols, tl.sum(acc, axis=0), mask=cmask)
# </kernel>


# A program owns BLOCK_C columns and walks every row, so the grid is C / BLOCK_C programs: narrow column
# blocks where C is small (the first version's fixed 256 left 2 to 4 programs walking 512 partial rows at
# the field shapes, most of those backward passes' time on the H200). A tile of 2048 values a step.
TILE, MIN_BLOCK_C, MAX_BLOCK_C, WANT_PROGRAMS = 2048, 32, 256, 128


def sum_config(C: int) -> dict:
    block_c = max(MIN_BLOCK_C, min(MAX_BLOCK_C, common.pow2(common.cdiv(C, WANT_PROGRAMS))))
    return dict(BLOCK_N=TILE // block_c, BLOCK_C=block_c, num_warps=4)


def column_sum(part: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` [C] = the column sums of the contiguous float32 ``part`` [n, C], added in row order."""
    n, C = part.shape
    consts, launch = common.split(sum_config(C))
    _column_sum_kernel[(common.cdiv(C, consts["BLOCK_C"]),)](part, out, n, C, **consts, **launch)
    return out
