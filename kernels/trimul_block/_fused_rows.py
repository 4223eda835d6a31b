"""The fused road's row helpers, shared by its kernels (``_fused``, ``_fused_resident``): bf16 rounding as the
GPU stores it, and LayerNorm over rows of a tile."""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.layernorm.triton_kernel import _down_scale


# <kernel>
@triton.jit
def _round(x, BF16: tl.constexpr, EMULATE: tl.constexpr):
    # x as the GPU stores it at bf16, rounded to nearest even; under the interpreter (which cuts the
    # mantissa at every conversion) as FP32 holding the same bf16 values, rounded by hand
    if BF16:
        if EMULATE:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return bits.to(tl.float32, bitcast=True)
        else:
            return x.to(tl.bfloat16)
    else:
        return x


@triton.jit
def _layernorm_rows(ptrs, mask, GAMMA, BETA, cs, cmask, width, eps, AXIS: tl.constexpr = 1):
    # rows of ``width`` values (padded with zeros to the tile) normalised in FP32, padding left at zero;
    # the rows run along AXIS (1: a [rows, width] tile; 0: [width, rows], a tile read in a channel-major
    # tensor's own order). Each row is first scaled by a power of two below its largest value, as the
    # project's LayerNorm does (kernels/layernorm): the squares of values past 2^64 would overflow, and s
    # cancels but in eps
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    s = _down_scale(tl.max(tl.abs(x), axis=AXIS))
    x = x * tl.expand_dims(s, AXIS)
    mean = tl.sum(x, axis=AXIS) / width
    d = tl.where(mask, x - tl.expand_dims(mean, AXIS), 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=AXIS) / width + eps * s * s)
    gamma = tl.load(GAMMA + cs, mask=cmask, other=0.0).to(tl.float32)
    beta = tl.load(BETA + cs, mask=cmask, other=0.0).to(tl.float32)
    return d * tl.expand_dims(rstd, AXIS) * tl.expand_dims(gamma, 1 - AXIS) + tl.expand_dims(beta, 1 - AXIS)
# </kernel>
