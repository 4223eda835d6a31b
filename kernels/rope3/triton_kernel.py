"""V-JEPA 2's rotary position embedding in one launch: the fusion the model's own code leaves undone.

Each attention layer rotates its queries and keys along three axes of the token grid (frame, row,
column), a third of each head's channels per axis, the rest passed through. The model does it as about
twelve PyTorch calls per axis (angles, sin, cos, repeats, the pairwise swap, products, a sum) and a
concatenation: at 16 frames in bf16 the profile put 62% of the encoder's kernel time in elementwise
kernels. Here one program reads a block of tokens of one head once, forms the angles and the rotation in
FP32 and writes the result once.

The function is the model's, with one difference of precision: the model forms its angles in the
activations' dtype (in bf16, position times frequency rounded to 8 bits, up to 0.03 rad at position 15);
this kernel forms them in FP32, nearer the float64 reference. Only the encoder's case is taken (no
position masks, ids 0..N-1 over the grid); the model swap (``mage.ext.models.rope``) leaves any other
call to the model's code.

Two faces: ``mage::vjepa2_rope3`` (x, grid, seg), the operator the swapped model calls (torch.compile
graphs keep it as one call), and the op's 'triton' column (x, grid, out=None), which takes the axis
width from the head size as the model does.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels._triton import TileTable, common, register_kernel
from kernels._triton.operator import kernel_op, op_launch
from mage import ops
from mage.errors import MageInputError

from .spec import SPEC, THETA, seg_width

LOG2_THETA = math.log2(THETA)  # the model's base (the spec's), 10000 ** (-k / (S / 2)) = 2 ** (-k / (S / 2) * log2 10000)


# <kernel>
@triton.jit
def _rope3_kernel(X, Y, N, H, sx_b, sx_h, sx_n, GRID: tl.constexpr, SEG: tl.constexpr, D: tl.constexpr,
                  DP: tl.constexpr, BLOCK_N: tl.constexpr, LOG2_BASE: tl.constexpr):
    # X [B, H, N, D] with strides (sx_b, sx_h, sx_n, 1); Y the same shape, contiguous
    bh = tl.program_id(0)
    b, h = bh // H, bh % H
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    j = tl.arange(0, DP)
    nmask = n < N
    mask = nmask[:, None] & (j < D)[None, :]
    base = X + b.to(tl.int64) * sx_b + h.to(tl.int64) * sx_h + n.to(tl.int64)[:, None] * sx_n
    x = tl.load(base + j[None, :], mask=mask, other=0.0).to(tl.float32)
    # the pairwise partner: (x[2i], x[2i + 1]) -> (-x[2i + 1], x[2i])
    seg = j // SEG
    # (its mask: with an odd D the last channel's partner is past the row; that channel is passed through)
    pmask = nmask[:, None] & ((j ^ 1) < D)[None, :] & (seg < 3)[None, :]
    xp = tl.load(base + (j ^ 1)[None, :], mask=pmask, other=0.0).to(tl.float32)
    y = tl.where((j % 2 == 0)[None, :], -xp, xp)
    # each channel's axis (0 frame, 1 row, 2 column, 3 passed through) and frequency; the model repeats
    # its SEG / 2 angles twice along the segment (not pairwise), so channel k and k + SEG / 2 share one
    k = (j % SEG) % (SEG // 2)
    omega = tl.exp2(-(k.to(tl.float32) / (SEG // 2)) * LOG2_BASE)
    frame = n // (GRID * GRID)
    row = (n % (GRID * GRID)) // GRID
    col = n % GRID
    pos = tl.where((seg == 0)[None, :], frame[:, None],
                   tl.where((seg == 1)[None, :], row[:, None], col[:, None])).to(tl.float32)
    angle = pos * omega[None, :]
    out = tl.where((seg < 3)[None, :], x * tl.cos(angle) + y * tl.sin(angle), x)
    dst = Y + (bh.to(tl.int64) * N + n.to(tl.int64))[:, None] * D + j[None, :]
    tl.store(dst, out.to(Y.dtype.element_ty), mask=mask)
# </kernel>


# One config: the kernel as it was checked on an H100 inside the encoder (32 tokens a program, Triton's
# default of 4 warps). No tile sweep has been run on it; a table keeps the recorded config exact.
TILES = TileTable("rope3", {"n32_w4": dict(BLOCK_N=32, num_warps=4)}, base="n32_w4", sizes=("N", "D"))
FIRST = TILES["n32_w4"]


def _plan(consts, launch, N, D):
    """(programs along the tokens, kernel keywords) of a call (memoised by ``TILES.plan``)."""
    return common.cdiv(N, consts["BLOCK_N"]), dict(D=D, DP=max(16, common.pow2(D)), **consts, **launch)


def rope3(x: torch.Tensor, grid: int, seg: int, out=None, **config) -> torch.Tensor:
    """V-JEPA 2's three-axis rotation of ``x`` [B, H, N, D] (queries or keys, any strides with the last
    one 1) for tokens 0..N-1 on a ``grid`` x ``grid`` frame, ``seg`` channels an axis; a new contiguous
    tensor of x's dtype, or ``out``."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.dtype not in (torch.float32, torch.bfloat16):
        raise MageInputError("rope3", "x", "must be a float32 or bfloat16 tensor [batch, heads, tokens, channels]")
    B, H, N, D = x.shape
    if seg < 2 or seg % 2 or 3 * seg > D:
        raise MageInputError("rope3", "seg", f"must be even, at least 2 and at most a third of {D} channels, got {seg}")
    if grid < 1:
        raise MageInputError("rope3", "grid", f"must be at least 1, got {grid}")
    common.on_device("rope3", {"x": x})  # a tensor the kernel cannot read, refused before the launch
    if x.stride(-1) != 1:
        x = x.contiguous()
    if out is None:
        y = torch.empty((B, H, N, D), dtype=x.dtype, device=x.device)
    else:
        ops.check_out("rope3", out, (B, H, N, D), x.dtype, x.device)
        y = out
    if y.numel():
        tiles, kw = TILES.plan(_plan, (N, D), config)
        op_launch(_rope3_kernel, (B * H, tiles), x, y, N, H, x.stride(0), x.stride(1), x.stride(2),
                  GRID=grid, SEG=seg, LOG2_BASE=LOG2_THETA, **kw)
    return y


def _fake(x, grid, seg):
    return x.new_empty(x.shape)


@kernel_op("mage::vjepa2_rope3", _fake, kernels=(_rope3_kernel,))
def _rope3_op(x: torch.Tensor, grid: int, seg: int) -> torch.Tensor:
    return rope3(x, grid, seg)


def rope3_column(x, grid, out=None, **config):
    """The op's column: ``rope3`` with the model's axis width for x's head size, the spec's checks first
    (so a bad call names the op's own arguments, never the derived ``seg``)."""
    SPEC.validate(x, grid)
    return rope3(x, grid, seg_width(x.shape[-1]), out=out, **config)


# bf16 storage runs the FP32 config: the angles and the rotation in FP32, one rounding at the store
for _dtype in SPEC.dtypes:
    register_kernel("rope3", rope3_column, TILES, precision=_dtype)
