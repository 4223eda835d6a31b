"""bias_gelu in Triton: y = gelu(x + b) with the exact erf GELU, fused so x is read once and y written
once. Each program takes a [BLOCK_R, BLOCK_C] tile and loads its slice of b once for all BLOCK_R rows.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops

from kernels._triton import TileTable, common, register_kernel

from .spec import SPEC


# <kernel>
@triton.jit
def _bias_gelu_kernel(
    X, Bias, Y,  # pointers to x [R, C], b [C] and the output y [R, C]
    R, C,  # rows and columns
    stride_x, stride_y,  # row strides of x and y (columns are contiguous)
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_C: tl.constexpr,  # columns per program
    EVEN: tl.constexpr,  # the tiles cover R x C exactly: no masks (a fact of the shape, not a choice)
    EVICT: tl.constexpr,  # stream x and y past L2 (evict first) and keep b (evict last)
    LINEAR: tl.constexpr,  # one 1-d grid in memory order (else 2-d, programs walking down the rows)
):
    if LINEAR:  # consecutive programs take consecutive tiles of a row: the GPU streams x in order
        per_row = tl.cdiv(C, BLOCK_C)
        pid = tl.program_id(0)
        tile_r, tile_c = pid // per_row, pid % per_row
    else:
        tile_r, tile_c = tl.program_id(0), tl.program_id(1)
    row = tile_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tile_c * BLOCK_C + tl.arange(0, BLOCK_C)
    # 64-bit row offsets: R * C can pass 2^31 elements at sizes that still fit in memory
    x_ptrs = X + row.to(tl.int64)[:, None] * stride_x + cols[None, :]
    y_ptrs = Y + row.to(tl.int64)[:, None] * stride_y + cols[None, :]
    # Each value of x is used once, b's slice by every row: the hints say so to the cache, so the
    # stream of x and y does not push b (and whatever the next kernel wants) out of L2.
    stream: tl.constexpr = "evict_first" if EVICT else ""
    keep: tl.constexpr = "evict_last" if EVICT else ""
    if EVEN:  # no masks: the loads and stores compile to plain vector instructions
        b = tl.load(Bias + cols, eviction_policy=keep)
        x = tl.load(x_ptrs, eviction_policy=stream)
    else:
        mask = (row < R)[:, None] & (cols < C)[None, :]
        b = tl.load(Bias + cols, mask=cols < C, other=0.0, eviction_policy=keep)
        x = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy=stream)
    # bf16 storage (the bf16 column, the model blocks' bf16 rows): the sum and the GELU in FP32, rounded
    # once at the store; for FP32 tensors both conversions are no-ops and the kernel is unchanged
    z = x.to(tl.float32) + b.to(tl.float32)[None, :]
    y = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))  # erf(z / sqrt 2)
    if EVEN:
        tl.store(y_ptrs, y, eviction_policy=stream)
    else:
        tl.store(y_ptrs, y, mask=mask, eviction_policy=stream)
# </kernel>


def _tile(rows, cols, warps, evict=0, linear=0):
    return dict(BLOCK_R=rows, BLOCK_C=cols, num_warps=warps, EVICT=evict, LINEAR=linear)


# Memory-bound: what matters is bytes in flight per SM (tile size x resident programs) and few
# programs' worth of tail; the candidates trade tile size against warps. The sweep tries them in this
# order, the plain one first.
TILES = TileTable("bias_gelu", {
    "r1_c1024_w4": _tile(1, 1024, 4),
    "r4_c1024_w4": _tile(4, 1024, 4),
    "r8_c512_w4": _tile(8, 512, 4),
    "r8_c1024_w8": _tile(8, 1024, 8),
    "r16_c512_w8": _tile(16, 512, 8),
    "r16_c1024_w8": _tile(16, 1024, 8),
    "r32_c256_w8": _tile(32, 256, 8),
    "r2_c4096_w8": _tile(2, 4096, 8),
    # Small programs for short rows (C = 512, a 1 x 1024 tile is half masked): at 8 MB the kernel is
    # latency-bound, and more programs with fewer elements each keep more loads in flight.
    "r1_c512_w4": _tile(1, 512, 4),
    "r2_c512_w4": _tile(2, 512, 4),
    "r1_c512_w2": _tile(1, 512, 2),
    "r4_c512_w8": _tile(4, 512, 8),
    # Cache hints, and more bytes per thread (16 or 32 values: four or eight 16-byte loads in flight)
    "r1_c1024_w4_evict": _tile(1, 1024, 4, evict=1),
    "r1_c2048_w4_evict": _tile(1, 2048, 4, evict=1),
    "r2_c2048_w8_evict": _tile(2, 2048, 8, evict=1),
    "r1_c4096_w8_evict": _tile(1, 4096, 8, evict=1),
    "r1_c2048_w4": _tile(1, 2048, 4),
    "r1_c512_w4_evict": _tile(1, 512, 4, evict=1),
    # Programs in memory order (the 2-d grid sends consecutive programs down a column of tiles, rows
    # 32 KB apart at 8192 columns; a streaming kernel wants its reads in address order)
    "r1_c1024_w4_linear": _tile(1, 1024, 4, linear=1),
    "r1_c2048_w4_linear": _tile(1, 2048, 4, linear=1),
    "r1_c1024_w4_evict_linear": _tile(1, 1024, 4, evict=1, linear=1),
    "r1_c512_w4_linear": _tile(1, 512, 4, linear=1),
}, base="r8_c512_w4", rule=(
    # The best kernel times of the H200 tile sweeps (data/h200/tiles.csv and data/h200-issue14-dev; times
    # in kernels/NOTES.md), each where it was measured: a few thousand rows of 512 columns or fewer, one
    # row of 512 a program with 4 warps; 8192-column rows by the ten thousand, the plain config, 5% behind
    # torch.compile's kernel. The memory-order (linear) entries are the prediction that closes that gap;
    # they are not measured yet, so the rule picks none of them.
    ("r1_c512_w4", lambda s: 256 < s["C"] <= 512 and 1024 <= s["R"] <= 4096),
    ("r1_c1024_w4", lambda s: s["C"] >= 8192 and s["R"] >= 8192),
), sizes=("R", "C"))
FIRST = TILES["r1_c1024_w4"]


_FLOAT = frozenset(ops.FLOAT)


def _good(x, b) -> bool:
    """The spec's checks of a well-formed call (FP32, or bf16 storage throughout) in a few attribute
    reads: True only where ``SPEC.validate`` passes (a False sends the call to it, which names what is
    wrong)."""
    return (type(x) is torch.Tensor and type(b) is torch.Tensor and x.dtype in _FLOAT and b.dtype is x.dtype
            and x.ndim == 2 and b.ndim == 1 and b.shape[0] == x.shape[1] and x.device == b.device)


def _checked(x, b) -> None:
    """Every check, once per call: the common case (CUDA tensors that pass) in a few attribute reads,
    anything else (CPU, a bad input) through the full checks, which raise."""
    if not (_good(x, b) and x.is_cuda):
        SPEC.validate(x, b)
        common.on_device("bias_gelu", {"x": x, "b": b})


def _plan(consts, launch, R, C):
    """(grid, kernel keywords) of a call from its tiles and sizes (memoised by ``TILES.plan``)."""
    tiles = (common.cdiv(R, consts["BLOCK_R"]), common.cdiv(C, consts["BLOCK_C"]))
    grid = (tiles[0] * tiles[1],) if consts["LINEAR"] else tiles
    even = R % consts["BLOCK_R"] == 0 and C % consts["BLOCK_C"] == 0
    return grid, dict(EVEN=even, **consts, **launch)


def bias_gelu(x, b, out=None, **config):
    """y = gelu(x + b), exact GELU. x's columns must be contiguous (a strided view is copied first)."""
    _checked(x, b)
    R, C = x.shape
    if out is None:
        # x's own layout where it is row-major (the cheapest allocation), else row-major
        out = torch.empty_like(x) if x.is_contiguous() else x.new_empty((R, C))
    else:
        ops.check_out("bias_gelu", out, (R, C), x.dtype, x.device)
    if R == 0 or C == 0:
        return out
    if x.stride(1) != 1:
        x = x.contiguous()  # costs one extra read and write of x
    if b.stride(0) != 1:
        b = b.contiguous()  # the kernel reads b's C values as one run
    grid, kw = TILES.plan(_plan, (R, C), config)
    common.launch(_bias_gelu_kernel, grid, x, b, out, R, C, x.stride(0), out.stride(0), **kw)
    return out


# bf16 storage runs the FP32 tiles (the tile sweeps were FP32's): the math in FP32, one rounding at the store
for _dtype in SPEC.dtypes:
    register_kernel("bias_gelu", bias_gelu, TILES, precision=_dtype)


@torch.library.custom_op("mage::triton_bias_gelu", mutates_args=())
def bias_gelu_op(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it."""
    return bias_gelu(x, b)


@bias_gelu_op.register_fake
def _(x, b):
    SPEC.validate(x, b)  # metadata only (a call with any 'meta' input lands here); the launcher's checks
    return torch.empty_like(x)
