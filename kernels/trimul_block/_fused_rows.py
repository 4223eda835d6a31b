"""The fused road's row helpers, shared by its kernels (``_fused``, ``_fused_resident``, ``_fused_cm``, ``_fused_fold``,
``_fused_pipe``): bf16 rounding as the GPU stores it, LayerNorm over rows of a tile, the gates' sigmoid in the form a
config names, and a tile's pairs and their offsets (a grid program's tile, or each tile a persistent one walks)."""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.layernorm.triton_kernel import _down_scale, _rstd


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
def _load_rows(ptrs, mask):
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _deviations(x, mask, width, AXIS: tl.constexpr, CENTER: tl.constexpr):
    # rows' deviations from their mean (padding left at zero) and their variance, as _layernorm_rows forms them
    mean = tl.sum(x, axis=AXIS) / width
    d = tl.where(mask, x - tl.expand_dims(mean, AXIS), 0.0)
    if CENTER:  # FP32 rows: the deviations' own mean taken out, as the project's LayerNorm does, so a mean's rounding
        # never reads as spread (a constant row near 3e37, scaled far down where eps's share underflows, came out as
        # noise). bf16 rows need none: a sum of up to 256 of them is exact in FP32, and so is a constant row's mean
        d = tl.where(mask, d - tl.expand_dims(tl.sum(d, axis=AXIS) / width, AXIS), 0.0)
    return d, tl.sum(d * d, axis=AXIS) / width


@triton.jit
def _scaled_deviations(x, mask, width, eps, AXIS: tl.constexpr, CENTER: tl.constexpr):
    # the deviations and 1 / sqrt(var + eps) of rows first scaled by a power of two below their largest value, as the
    # project's LayerNorm does (kernels/layernorm): the squares of values past 2^64 would overflow, and s cancels but
    # in eps
    s = _down_scale(tl.max(tl.abs(x), axis=AXIS))
    d, var = _deviations(x * tl.expand_dims(s, AXIS), mask, width, AXIS, CENTER)
    rstd, _ = _rstd(var, s, eps)  # a constant row scaled far down: 0 (its d is 0)
    return d, rstd


@triton.jit
def _layernorm_rows(ptrs, mask, GAMMA, BETA, cs, cmask, width, eps, AXIS: tl.constexpr = 1,
                    CENTER: tl.constexpr = False, FAST: tl.constexpr = False):
    # rows of ``width`` values (padded with zeros to the tile) normalised in FP32, padding left at zero;
    # the rows run along AXIS (1: a [rows, width] tile; 0: [width, rows], a tile read in a channel-major
    # tensor's own order). FAST: the tile's rows unscaled where none of their variances is past 1e36 (no square
    # overflowed, none is NaN), the scaled form only for a tile with such a row: the scaling's max, its reduction
    # and its product are a few instructions an element in kernels whose profile found them instruction-bound.
    # Unscaled, rows whose largest value is under 2 are the scaled form's own numbers; others differ by the
    # rounding of eps's share
    if FAST:
        d, var = _deviations(_load_rows(ptrs, mask), mask, width, AXIS, CENTER)
        rstd = 1.0 / tl.sqrt(var + eps)
        if tl.sum(tl.where(var <= 1e36, 0, 1), axis=0) > 0:  # read again: x kept beside d cost 46-57 registers
            d, rstd = _scaled_deviations(_load_rows(ptrs, mask), mask, width, eps, AXIS, CENTER)
    else:
        d, rstd = _scaled_deviations(_load_rows(ptrs, mask), mask, width, eps, AXIS, CENTER)
    return _affine(d, rstd, GAMMA, BETA, cs, cmask, AXIS)


@triton.jit
def _layernorm_tile(x, mask, GAMMA, BETA, cs, cmask, width, eps, CENTER: tl.constexpr = False):
    # as _layernorm_rows on a [rows, width] tile already loaded (FP32, zeros past its edges): for a kernel that
    # issued the tile's load ahead, while it worked on the one before
    d, rstd = _scaled_deviations(x, mask, width, eps, 1, CENTER)
    return _affine(d, rstd, GAMMA, BETA, cs, cmask, 1)


@triton.jit
def _affine(d, rstd, GAMMA, BETA, cs, cmask, AXIS: tl.constexpr):
    gamma = tl.load(GAMMA + cs, mask=cmask, other=0.0).to(tl.float32)
    beta = tl.load(BETA + cs, mask=cmask, other=0.0).to(tl.float32)
    return d * tl.expand_dims(rstd, AXIS) * tl.expand_dims(gamma, 1 - AXIS) + tl.expand_dims(beta, 1 - AXIS)


@triton.jit
def _sigmoid(x, SIG: tl.constexpr):
    # SIG 'exact': Triton's 1 / (1 + exp(-x)), whose exponential and division compile with range checks for
    # subnormals (about 11 instructions and 2 special-function ops a value: a source-level profile of the
    # first kernel found its 384 sigmoids a pair to be a third of its instructions). 'fast': the same formula
    # on the special-function unit's approximations with subnormals flushed (4 instructions, relative error
    # near 2^-21: past +-88 the exponential saturates to inf or 0 and the sigmoid to 0 or 1, as it should).
    # 'tanh': sigmoid(x) = (1 + tanh(x / 2)) / 2 on one special-function op (3 instructions; tanh.approx's
    # relative error is 2^-11, so about 2.5e-4 absolute on the gate, under bf16's rounding of a gated value)
    if SIG == "fast":
        return tl.inline_asm_elementwise(
            "{ .reg .f32 t; mul.f32 t, $1, 0fBFB8AA3B; ex2.approx.ftz.f32 t, t; add.f32 t, t, 0f3F800000; "
            "rcp.approx.ftz.f32 $0, t; }", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    elif SIG == "tanh":
        return tl.inline_asm_elementwise(
            "{ .reg .f32 t; mul.f32 t, $1, 0f3F000000; tanh.approx.f32 t, t; fma.rn.f32 $0, t, 0f3F000000, "
            "0f3F000000; }", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.sigmoid(x)


@triton.jit
def _tile_pairs(t, NN, H, BLOCK_R: tl.constexpr, OFFS_64: tl.constexpr):
    # tile t's pairs, all of one complex: their rows of the [B N^2, *] tensors, their place in the
    # channel-major [B, H, N^2] ones, which exist, and the channel stride N^2 (64-bit where offsets need
    # it: channel h of the last pair is h N^2 elements on, which passes 2^31 before N^2 does). Within one
    # complex both run contiguously, which the compiler sees (a division of the row by N^2 would hide
    # it): whole-sector, vector loads and stores along the pairs of a channel. Tiles go complex by complex
    # on one axis (the second axis of a grid stops at 65535)
    cx, p0 = _tile_origin(t, NN, BLOCK_R)
    pair = p0 + tl.arange(0, BLOCK_R)
    nn = NN
    if OFFS_64:
        cx = cx.to(tl.int64)
        pair = pair.to(tl.int64)
        nn = nn.to(tl.int64)
    return cx * nn + pair, cx * H * nn + pair, pair < nn, nn


@triton.jit
def _pairs(NN, H, BLOCK_R: tl.constexpr, OFFS_64: tl.constexpr):
    # a grid program's pairs: tile pid's
    return _tile_pairs(tl.program_id(0), NN, H, BLOCK_R, OFFS_64)


@triton.jit
def _tile_origin(t, NN, BLOCK_R: tl.constexpr):
    # tile t's complex and its first pair (as _tile_pairs walks them), a descriptor's coordinates
    tiles = tl.cdiv(NN, BLOCK_R)
    return t // tiles, (t % tiles) * BLOCK_R
# </kernel>
