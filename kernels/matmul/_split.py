"""fp32x3's operands split once, before the GEMM (the Hopper road's config key ``SPLIT``).

Three TF32 products give FP32 accuracy: x = hi + lo with hi = x rounded to TF32 (10 mantissa bits) and
lo = x - hi (exact in FP32), then A B ~ A_hi B_lo + A_lo B_hi + A_hi B_hi. Triton's ``tf32x3`` splits
each tile in registers after it is loaded, every k step of every output tile: at 4096^3 with 128x128
tiles each element of A is split N / 128 = 32 times, and wgmma, which reads B from shared memory, gets
the split halves of B only after they are written back there. Splitting each operand once, into hi and
lo copies, is one elementwise pass (at 4096^3 about 380 MB, 0.1 ms at the copy rate, against a GEMM of
about 1.3 ms); the main loop is then three plain TF32 wgmma products on tiles TMA put in shared memory.
The pass writes the copies K-major, which 4-byte wgmma needs for B anyway: it replaces B's K-major copy.

The same kernel without the split (``k_major``) is the road's K-major copy of a [K, N] B for TF32 and
unsplit fp32x3: PyTorch's ``copy_`` from a transposed view reads with a stride of a whole row (one 4-byte
element a 32-byte sector), which the H200 sweep timed at about 0.1 ms for 4096^2 floats (1.3 TB/s); a tile
turned around in shared memory reads and writes whole lines.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import common

TILE = 64  # a program's [64, 64] tile: 16 KB in (FP32), 32 KB out split, 16 KB copied; the transpose goes through shared memory


# <kernel>
@triton.jit
def _split_kernel(X, HI, LO, R, C, sx_r, sx_c, ld, BLOCK: tl.constexpr, OFFS_64: tl.constexpr, PARTS: tl.constexpr):
    # out[r, c] = X[r * sx_r + c * sx_c] as hi + lo, both [R, C] with row stride ``ld`` (16-byte aligned);
    # without PARTS, x itself into HI (any dtype). Triton specializes a stride of 1, so the load is laid
    # out along X's contiguous axis and the store along the output's: the layouts meet in shared memory
    # one grid axis (the second stops at 65535 programs: K past 4 million would not launch)
    col_tiles = tl.cdiv(C, BLOCK)
    rows = (tl.program_id(0) // col_tiles) * BLOCK + tl.arange(0, BLOCK)
    cols = (tl.program_id(0) % col_tiles) * BLOCK + tl.arange(0, BLOCK)
    if OFFS_64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = (rows < R)[:, None] & (cols < C)[None, :]
    x = tl.load(X + rows[:, None] * sx_r + cols[None, :] * sx_c, mask=mask, other=0.0)
    out = rows[:, None] * ld + cols[None, :]
    if PARTS:
        # round to nearest TF32 (ties away from zero, as cvt.rna): add half of the last kept bit, cut the rest
        bits = x.to(tl.uint32, bitcast=True)
        hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
        tl.store(HI + out, hi, mask=mask)
        tl.store(LO + out, x - hi, mask=mask)  # exact: hi and x share their leading bits
    else:
        tl.store(HI + out, x, mask=mask)
# </kernel>


def split(t: torch.Tensor, rows: int, cols: int, transpose: bool):
    """(hi, lo): ``t`` (or ``t.t()``) as [rows, cols] views, cols contiguous, rows 16-byte aligned (what
    a tensor descriptor needs), whose sum is ``t`` exactly and whose hi holds TF32 values."""
    buf = _launch(t, rows, cols, transpose, parts=True)
    return buf[0, :, :cols], buf[1, :, :cols]


def k_major(t: torch.Tensor, rows: int, cols: int, transpose: bool) -> torch.Tensor:
    """A copy of ``t`` (or ``t.t()``) as a [rows, cols] view, cols contiguous, rows 16-byte aligned."""
    return _launch(t, rows, cols, transpose, parts=False)[0, :, :cols]


def _launch(t, rows, cols, transpose, parts):
    v = t.t() if transpose else t
    pad = max(1, 16 // t.element_size())
    ld = common.cdiv(cols, pad) * pad
    buf = t.new_empty((2 if parts else 1, rows, ld))
    if rows and cols:
        # the reach of t's strides, not its size: a column slice of a wide tensor is small and far-reaching
        offs_64 = buf.numel() >= common.INT32_LIMIT or common.max_offset(t) >= common.INT32_LIMIT
        grid = (common.cdiv(rows, TILE) * common.cdiv(cols, TILE),)
        _split_kernel[grid](v, buf[0], buf[-1], rows, cols, v.stride(0), v.stride(1), ld, BLOCK=TILE,
                            OFFS_64=offs_64, PARTS=parts, num_warps=4)
    return buf
