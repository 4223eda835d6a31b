"""bias_gelu in Triton: y = gelu(x + b) with the exact erf GELU, fused so x is read once and y written
once. Each program takes a [BLOCK_R, BLOCK_C] tile and loads its slice of b once for all BLOCK_R rows.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops

from kernels._triton import common, register_kernel

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


FIRST = dict(BLOCK_R=1, BLOCK_C=1024, num_warps=4, EVICT=0, LINEAR=0)
# Memory-bound: what matters is bytes in flight per SM (tile size x resident programs) and few
# programs' worth of tail; the candidates trade tile size against warps.
SWEEP = [FIRST] + [dict(c, EVICT=0, LINEAR=0) for c in (
    dict(BLOCK_R=4, BLOCK_C=1024, num_warps=4),
    dict(BLOCK_R=8, BLOCK_C=512, num_warps=4),
    dict(BLOCK_R=8, BLOCK_C=1024, num_warps=8),
    dict(BLOCK_R=16, BLOCK_C=512, num_warps=8),
    dict(BLOCK_R=16, BLOCK_C=1024, num_warps=8),
    dict(BLOCK_R=32, BLOCK_C=256, num_warps=8),
    dict(BLOCK_R=2, BLOCK_C=4096, num_warps=8),
    # Small programs for the field shape (C = 512, a 1 x 1024 tile is half masked): at 8 MB the
    # kernel is latency-bound, and more programs with fewer elements each keep more loads in flight.
    dict(BLOCK_R=1, BLOCK_C=512, num_warps=4),
    dict(BLOCK_R=2, BLOCK_C=512, num_warps=4),
    dict(BLOCK_R=1, BLOCK_C=512, num_warps=2),
    dict(BLOCK_R=4, BLOCK_C=512, num_warps=8),
)] + [dict(c, LINEAR=0) for c in (
    # Cache hints, and more bytes per thread (16 or 32 values: four or eight 16-byte loads in flight)
    dict(BLOCK_R=1, BLOCK_C=1024, num_warps=4, EVICT=1),
    dict(BLOCK_R=1, BLOCK_C=2048, num_warps=4, EVICT=1),
    dict(BLOCK_R=2, BLOCK_C=2048, num_warps=8, EVICT=1),
    dict(BLOCK_R=1, BLOCK_C=4096, num_warps=8, EVICT=1),
    dict(BLOCK_R=1, BLOCK_C=2048, num_warps=4, EVICT=0),
    dict(BLOCK_R=1, BLOCK_C=512, num_warps=4, EVICT=1),
)] + [
    # Programs in memory order (the 2-d grid sends consecutive programs down a column of tiles, rows
    # 32 KB apart at the large shape; a streaming kernel wants its reads in address order)
    dict(BLOCK_R=1, BLOCK_C=1024, num_warps=4, EVICT=0, LINEAR=1),
    dict(BLOCK_R=1, BLOCK_C=2048, num_warps=4, EVICT=0, LINEAR=1),
    dict(BLOCK_R=1, BLOCK_C=1024, num_warps=4, EVICT=1, LINEAR=1),
    dict(BLOCK_R=1, BLOCK_C=512, num_warps=4, EVICT=0, LINEAR=1),
]
# The best kernel times of the H200 tile sweeps (data/h200/tiles.csv and data/h200-issue14-dev; times
# in kernels/NOTES.md): field, one row of 512 columns with 4 warps; large, the plain first config, 5%
# behind torch.compile's kernel. The memory-order (LINEAR) entries are the prediction that closes that
# gap; they are not measured yet, so no default uses them.
DEFAULTS = {"field": SWEEP[8], "large": SWEEP[0], "sweep": SWEEP[2]}


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


_PLANS: dict = {}


def _plan(table_id, R, C, config):
    """(grid, kernel keywords) of a call: a function of its sizes and config overrides only
    (``table_id``: the defaults table's identity, so a replaced table misses)."""
    consts, launch = common.choose_split("bias_gelu", DEFAULTS, dict(R=R, C=C), dict(config))
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
    grid, kw = common.plan(_PLANS, _plan, id(DEFAULTS), R, C, common.frozen(config))
    common.launch(_bias_gelu_kernel, grid, x, b, out, R, C, x.stride(0), out.stride(0), **kw)
    return out


# bf16 storage runs the FP32 tiles (the tile sweeps were FP32's): the math in FP32, one rounding at the store
for _dtype in SPEC.dtypes:
    register_kernel("bias_gelu", bias_gelu, DEFAULTS, SWEEP, precision=_dtype)


@torch.library.custom_op("mage::triton_bias_gelu", mutates_args=())
def bias_gelu_op(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it."""
    return bias_gelu(x, b)


@bias_gelu_op.register_fake
def _(x, b):
    SPEC.validate(x, b)  # metadata only (a call with any 'meta' input lands here); the launcher's checks
    return torch.empty_like(x)
