"""layernorm in Triton: each program normalises BLOCK_R rows over their C columns. A row that fits in
one block stays in registers (read once); a longer row is reduced in chunks and read a second time.
"""
from __future__ import annotations

import numbers

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import TileTable, common, register_kernel
from kernels._triton.operator import kernel_op, op_launch

from .spec import EPS, SPEC


# <kernel>
@triton.jit
def _down_scale(amax):
    # 2^-e for amax in [2^e, 2^(e+1)), e clamped to [0, 126]: a power of two, so multiplying by it is
    # exact and the statistics of a row that needs no scaling (max |x| < 2) are those of x itself.
    e = (amax.to(tl.int32, bitcast=True) >> 23) - 127  # the exponent field (amax >= 0: no sign bit)
    e = tl.minimum(tl.maximum(e, 0), 126)
    return ((127 - e) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _rstd(var, s, eps):
    # 1 / sqrt(var + eps) of rows held in units of their scale s: (for y, in those units; for the stored stats, in
    # x's). Where eps s^2 underflows beside a variance of 0 (a constant row scaled far down) the square root is 0:
    # the row's deviations are all 0 then, y is beta whatever the first factor, and the stored one is 1 / sqrt(eps)
    # (rstd * s is the product the kernel stored before this function: the same bits for every row with den > 0)
    den = var + eps * s * s
    rstd = tl.where(den > 0, 1.0 / tl.sqrt(den), 0.0)
    return rstd, tl.where(den > 0, rstd * s, 1.0 / tl.sqrt(eps))


@triton.jit
def _max_and_sum(a_max, a_sum, b_max, b_sum):
    return tl.maximum(a_max, b_max), a_sum + b_sum


@triton.jit
def _sum_and_sum(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def _layernorm_kernel(
    X, Gamma, Beta, Y,  # pointers to x [R, C], gamma [C], beta [C] and the output y [R, C]
    R, C,  # rows and columns
    stride_x, stride_y,  # row strides of x and y (columns are contiguous)
    eps,  # added to the variance
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_C: tl.constexpr,  # columns per chunk
    ONE_BLOCK: tl.constexpr,  # BLOCK_C >= C: the whole row is one chunk and stays in registers
    EVEN: tl.constexpr,  # one chunk of exactly C columns and R a multiple of BLOCK_R: no masks
    EVICT: tl.constexpr,  # stream x and y past L2 (evict first), keep gamma and beta (evict last)
    Mean=None, Rstd=None,  # with STATS: each row's mean and 1 / sqrt(var + eps) [R], in x's units
    STATS: tl.constexpr = False,  # save the statistics for the backward (training); off: inference
    stride_xc=1, COL_STRIDE: tl.constexpr = False,  # x's column stride, read where COL_STRIDE (a transposed x)
):
    # Reduction scheme. One chunk: two passes over the registers (mean, then the mean of squared
    # deviations), exact and still one read of x from memory. Several chunks: each chunk's mean and
    # sum of squared deviations, again two-pass within the chunk, merged into the row's running pair
    # with Chan's update (Welford's at chunk granularity). The one-pass sum of x and of x^2 would be
    # cheaper but cancels catastrophically when |mean| >> std; per-element Welford costs a division
    # per element for no accuracy we need.
    # Range: squares of deviations past ~1.8e19 overflow fp32 (var = inf, y = 0). So the statistics
    # are taken of x * s, s = a power of two from the row's (chunk's) largest |x| that brings it
    # below 2, and only eps needs s: y = (xs - mean_s) / sqrt(var_s + eps s^2), since s cancels.
    # Rounding: sum(x) / C is off by up to an ulp or so of the mean, and in a row of equal values that
    # error is all the deviation there is: y = beta + gamma * error * rstd with rstd ~ 1/sqrt(eps), far
    # from the exact beta (a padded row, say). A correction (the mean of the deviations, added to the
    # mean) makes such rows exact and every mean more accurate.
    # Cost: the extra work stays in registers. One block: the two reductions as before (the second
    # of two values) and the scaled statistics only for rows that overflowed; chunked: two
    # reductions of two values per chunk, and a few operations an element.
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = row < R
    x_row = X + row.to(tl.int64)[:, None] * stride_x
    y_row = Y + row.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK_C)
    # x's columns: contiguous, or (COL_STRIDE) stride_xc apart, as in a channel-major buffer read as [pairs,
    # channels], where the rows are the contiguous dimension (the loads are then coalesced along the rows); the
    # contiguous case compiles as it did before the option
    if COL_STRIDE:
        x_cols = cols.to(tl.int64) * stride_xc
    else:
        x_cols = cols
    # Every x is read once and y written once, while every row reads gamma and beta: the hints say
    # so to the cache (a one-block row is read from memory once; the chunked road reads it twice and
    # keeps the default policy, so its second read finds the row in L2).
    stream: tl.constexpr = "evict_first" if EVICT and ONE_BLOCK else ""
    keep: tl.constexpr = "evict_last" if EVICT else ""
    if ONE_BLOCK:
        mask = rmask[:, None] & (cols < C)[None, :]
        if EVEN:  # plain vector loads, no mask
            x = tl.load(x_row + x_cols[None, :], eviction_policy=stream)
        else:
            x = tl.load(x_row + x_cols[None, :], mask=mask, other=0.0, eviction_policy=stream)
        # bf16 storage (the bf16 column, the model blocks' bf16 rows): statistics and output in FP32,
        # rounded once at the store; for FP32 tensors every such conversion is a no-op and the kernel is
        # unchanged
        x = x.to(tl.float32)
        # The plain statistics first (the second reduction also carries the correction); only a row
        # whose sums overflowed takes them again, scaled, from the registers (a branch never taken
        # by ordinary rows, so their instructions are those of the unscaled kernel plus one test).
        s = tl.full((BLOCK_R,), 1.0, dtype=tl.float32)
        mean = tl.sum(x, axis=1) / C
        dev = x - mean[:, None] if EVEN else tl.where(mask, x - mean[:, None], 0.0)
        sum1, sum2 = tl.reduce((dev, dev * dev), 1, _sum_and_sum)
        overflow = (tl.abs(sum2) == float("inf")) | (tl.abs(mean) == float("inf"))
        if tl.max(overflow.to(tl.int32), axis=0) > 0:
            s = _down_scale(tl.max(tl.abs(x), axis=1))
            x = x * s[:, None]
            mean = tl.sum(x, axis=1) / C
            dev = tl.where(mask, x - mean[:, None], 0.0)
            sum1, sum2 = tl.reduce((dev, dev * dev), 1, _sum_and_sum)
        fix = sum1 / C
        mean += fix
        rstd, rstd_x = _rstd(tl.maximum(sum2 / C - fix * fix, 0.0), s, eps)
        gamma = tl.load(Gamma + cols, mask=cols < C, other=0.0, eviction_policy=keep).to(tl.float32)
        beta = tl.load(Beta + cols, mask=cols < C, other=0.0, eviction_policy=keep).to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None] * gamma[None, :] + beta[None, :]
        if STATS:  # back in x's units: s is a power of two, so both are exact
            tl.store(Mean + row, mean / s, mask=rmask)
            tl.store(Rstd + row, rstd_x, mask=rmask)
        if EVEN:
            tl.store(y_row + cols[None, :], y, eviction_policy=stream)
        else:
            tl.store(y_row + cols[None, :], y, mask=mask, eviction_policy=stream)
    else:
        # mean and m2 are kept in units of the row's scale so far, s (a power of two that only
        # shrinks as larger chunks arrive: both are rescaled exactly when it does)
        s = tl.full((BLOCK_R,), 1.0, dtype=tl.float32)
        mean = tl.zeros((BLOCK_R,), dtype=tl.float32)
        m2 = tl.zeros((BLOCK_R,), dtype=tl.float32)
        for c0 in range(0, C, BLOCK_C):
            mask = rmask[:, None] & (c0 + cols < C)[None, :]
            x = tl.load(x_row + c0 * stride_xc + x_cols[None, :], mask=mask, other=0.0).to(tl.float32)
            amax, sum0 = tl.reduce((tl.abs(x), x * 2.3283064365386963e-10), 1, _max_and_sum)  # as above
            s_new = tl.minimum(s, _down_scale(amax))
            r = s_new / s  # a power of two <= 1: the running pair in the new units
            mean = mean * r
            m2 = m2 * (r * r)
            s = s_new
            x = x * s[:, None]
            n_a = c0 * 1.0  # columns merged so far, as a float
            n_b = tl.minimum(C - c0, BLOCK_C) * 1.0  # columns in this chunk
            mean_b = sum0 * (4294967296.0 * s) / n_b
            dev = tl.where(mask, x - mean_b[:, None], 0.0)
            sum1, sum2 = tl.reduce((dev, dev * dev), 1, _sum_and_sum)
            fix = sum1 / n_b  # the rounding left in mean_b (see above)
            mean_b += fix
            delta = mean_b - mean
            mean += delta * (n_b / (n_a + n_b))
            m2 += tl.maximum(sum2 - fix * sum1, 0.0) + delta * delta * (n_a * n_b / (n_a + n_b))
        rstd, rstd_x = _rstd(m2 / C, s, eps)
        if STATS:  # back in x's units (s a power of two: exact)
            tl.store(Mean + row, mean / s, mask=rmask)
            tl.store(Rstd + row, rstd_x, mask=rmask)
        for c0 in range(0, C, BLOCK_C):  # second read of x: from L2 while the rows are recent
            cmask = c0 + cols < C
            mask = rmask[:, None] & cmask[None, :]
            x = tl.load(x_row + c0 * stride_xc + x_cols[None, :], mask=mask, other=0.0).to(tl.float32)
            gamma = tl.load(Gamma + c0 + cols, mask=cmask, other=0.0, eviction_policy=keep).to(tl.float32)
            beta = tl.load(Beta + c0 + cols, mask=cmask, other=0.0, eviction_policy=keep).to(tl.float32)
            y = (x * s[:, None] - mean[:, None]) * rstd[:, None] * gamma[None, :] + beta[None, :]
            tl.store(y_row + c0 + cols[None, :], y, mask=mask)
# </kernel>


def _tile(rows, max_c, warps, evict=0):
    """BLOCK_R rows a program; MAX_BLOCK_C caps the chunk: BLOCK_C = min(next power of two >= C, MAX_BLOCK_C)."""
    return dict(BLOCK_R=rows, MAX_BLOCK_C=max_c, num_warps=warps, EVICT=evict)


# The sweep tries them in this order, the plain one (one row of up to 1024 columns a program) first;
# '_evict' configs carry the cache hints (see the kernel).
TILES = TileTable("layernorm", {
    "r1_c1024_w4": _tile(1, 1024, 4),
    "r1_c8192_w4": _tile(1, 8192, 4),
    "r1_c8192_w8": _tile(1, 8192, 8),
    "r1_c8192_w16": _tile(1, 8192, 16),
    "r2_c8192_w8": _tile(2, 8192, 8),
    "r4_c8192_w8": _tile(4, 8192, 8),
    "r4_c4096_w16": _tile(4, 4096, 16),
    "r8_c2048_w8": _tile(8, 2048, 8),
    "r1_c8192_w16_evict": _tile(1, 8192, 16, 1),
    "r1_c8192_w8_evict": _tile(1, 8192, 8, 1),
    "r2_c8192_w16_evict": _tile(2, 8192, 16, 1),
    "r1_c1024_w4_evict": _tile(1, 1024, 4, 1),
    "r2_c1024_w4_evict": _tile(2, 1024, 4, 1),
}, base="r1_c1024_w4", rule=(
    # The best kernel times of the H200 tile sweep (run 20261203T1645*, kernels/NOTES.md), each where it
    # was measured: long rows (4096 columns) by the ten thousand, one row a program in registers with 16
    # warps and the hints; about a thousand rows of exactly 1024 columns (one unmasked chunk), 4 warps
    # and the hints (both within half a percent of the same tiles without them). Elsewhere: the plain one.
    ("r1_c8192_w16_evict", lambda s: s["C"] >= 4096 and s["R"] >= 16384),
    ("r1_c1024_w4_evict", lambda s: s["C"] == 1024 and 512 <= s["R"] < 4096),
), sizes=("R", "C"))
FIRST = TILES["r1_c1024_w4"]


_FLOAT = frozenset(ops.FLOAT)


def _good(x, gamma, beta) -> bool:
    """The spec's checks of a well-formed call (FP32, or bf16 storage throughout) in a few attribute
    reads: True only where ``SPEC.validate`` passes (a False sends the call to it, which names what is
    wrong)."""
    T = torch.Tensor
    return (type(x) is T and type(gamma) is T and type(beta) is T and x.dtype in _FLOAT and gamma.dtype is x.dtype
            and beta.dtype is x.dtype and x.ndim == 2 and gamma.ndim == 1 and beta.ndim == 1
            and x.shape[1] != 0 and gamma.shape[0] == x.shape[1] and beta.shape[0] == x.shape[1]
            and x.device == gamma.device and x.device == beta.device)


def check_eps(eps) -> float:
    """eps keeps the square root away from zero: a positive, finite real number (a bool is not one),
    returned as the float the kernel takes."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < float(eps) < float("inf"):
        raise MageInputError("layernorm", "eps", f"must be a positive finite number, got {eps!r}")
    return float(eps)


def _checked(x, gamma, beta) -> None:
    """Every check, once per call: the common case (CUDA tensors that pass) in a few attribute reads,
    anything else (CPU, a bad input) through the full checks, which raise."""
    if not (_good(x, gamma, beta) and x.is_cuda):
        SPEC.validate(x, gamma, beta)
        common.on_device("layernorm", {"x": x, "gamma": gamma, "beta": beta})


def _plan(consts, launch, R, C):
    """(grid, kernel keywords) of a call from its tiles and sizes (memoised by ``TILES.plan``)."""
    block_c = min(common.pow2(C), consts.pop("MAX_BLOCK_C"))
    grid = (common.cdiv(R, consts["BLOCK_R"]),)
    return grid, dict(BLOCK_C=block_c, ONE_BLOCK=block_c >= C, EVEN=block_c == C and R % consts["BLOCK_R"] == 0,
                      **consts, **launch)


def layernorm(x, gamma, beta, out=None, stats=None, eps=EPS, **config):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over each row; eps is the spec's unless a model
    brings its own (V-JEPA 2 uses 1e-6). ``stats``: a pair of float32 tensors [R] that receive each
    row's mean and 1 / sqrt(var + eps) (the training path's)."""
    _checked(x, gamma, beta)
    if eps != EPS:  # the spec's own needs no check (and a NaN is never equal to it)
        eps = check_eps(eps)
    R, C = x.shape
    if stats is not None:  # the kernel writes one value per row into each: refuse what it would misplace
        if not isinstance(stats, (tuple, list)) or len(stats) != 2:
            raise MageInputError("layernorm", "stats", "must be a pair of tensors (mean, rstd)")
        for name, t in zip(("stats[0]", "stats[1]"), stats):
            if t is None:
                raise MageInputError("layernorm", name, "must be a float32 tensor, got None")
            ops.check_out("layernorm", t, (R,), torch.float32, x.device, name=name)
    if out is None:
        # x's own layout where it is row-major (the cheapest allocation), else row-major
        out = torch.empty_like(x) if x.is_contiguous() else x.new_empty((R, C))
    else:
        ops.check_out("layernorm", out, (R, C), x.dtype, x.device)
    if R == 0:
        return out
    if gamma.stride(0) != 1:
        gamma = gamma.contiguous()  # the kernel reads gamma and beta as runs of C values
    if beta.stride(0) != 1:
        beta = beta.contiguous()
    grid, kw = TILES.plan(_plan, (R, C), config)
    if stats is not None:
        kw = dict(kw, Mean=stats[0], Rstd=stats[1], STATS=True)
    # traced by torch.compile, every argument is given (the statistics' pointers aimed at the output, never
    # touched without STATS): the H100 run whose call left them to their defaults (None) failed in
    # Inductor's launch; this form passed there (f51adc8)
    traced = None if stats is not None else dict(Mean=out, Rstd=out, STATS=False)
    if x.stride(1) != 1:  # read in place (a transposed or channel-major x), not copied first
        kw = dict(kw, stride_xc=x.stride(1), COL_STRIDE=True)
    op_launch(_layernorm_kernel, grid, x, gamma, beta, out, R, C, x.stride(0), out.stride(0), eps, traced=traced, **kw)
    return out


# bf16 storage runs the FP32 tiles (the tile sweeps were FP32's): statistics in FP32, one rounding at the store
for _dtype in SPEC.dtypes:
    register_kernel("layernorm", layernorm, TILES, precision=_dtype)


def _fake(x, gamma, beta, eps=EPS):
    SPEC.validate(x, gamma, beta)  # metadata only (a call with any 'meta' input lands here)
    check_eps(eps)
    return x.new_empty(x.shape)  # contiguous, as the kernel writes it whatever x's layout


@kernel_op("mage::triton_layernorm", _fake, kernels=(_layernorm_kernel,))
def layernorm_op(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs (and models it is swapped into) can call it
    (and launch the kernel from their own code: ``kernel_op``)."""
    return layernorm(x, gamma, beta, eps=eps)
