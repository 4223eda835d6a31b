"""The triangle update's fused road (config ``ROAD='fused'``): three launches a call where the steps road
makes eight or nine, the shape cuEquivariance's kernels take (its H200 profile shows a packing pass, a
projection kernel, cuBLAS's batched GEMM and a finishing kernel):

1. ``_in_kernel``: a program takes IN_R pairs with all their C channels: LayerNorm, then the five
   projections against w_in in chunks of IN_H columns (a gate chunk and its value chunk together),
   sigmoid-gated, masked and stored channel-major, a and b [B, H, N, N] (the contraction's operands,
   k innermost), and the output gate as sigmoid(g) [B N^2, C]. z is read once and p [B N^2, 4H + C] never
   exists (the steps road writes it and reads it back twice: 2.7 GB of its 5 GB at N = 1024 and bf16).
2. the contraction o_c = a_c b_c^T channel by channel, channel-major [B, H, N, N] (no transposing copy):
   the triangle's batched GEMM (``BMM='triton'``, a launch a complex) or cuBLAS's (``BMM='cublas'``).
3. ``_out_kernel``: FIN_R pairs' H channels read from the channel-major o, LayerNorm over them, the
   output projection in chunks of FIN_C columns, its bias and the gate, stored [B N^2, C] once. With
   ``FIN_ZGATE`` it computes the output gate itself, from z's rows normalised again, and the first kernel
   stores a and b only.
A program holds its pairs' C (or H) channels whole: both at most ``MAX_WIDTH``.

Precision as on the steps road: FP32 math in every kernel, bf16 storage between them at bf16, and at
FP32 the projections as tf32x3 (FP32 accuracy on the tensor cores) and the contraction as ``CONTRACT``
says. At bf16 fewer values are rounded: p's gates and values, and the output projection before its gate,
stay FP32 inside a kernel, where the steps road stores each in bf16.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import common
from kernels.layernorm.spec import EPS
from kernels.triangle import _channel_major as road
from kernels.triangle import _hopper as tma_road

from ._fused_config import (BMMS, MAX_WIDTH, STAGES, config_limits, keys, launches,  # noqa: F401 - the road's API
                            refuse_bad_config)
from . import _fused_cm as cmk
from . import _fused_fold as fold
from . import _fused_pipe as pipe
from . import _fused_resident as res
from ._fused_rows import _layernorm_rows, _pairs, _round, _sigmoid, _tile_origin
from ._fused_weights import first_weights, gate_descriptors, gate_weights, out_weights, store_descriptors


# <kernel>
@triton.jit
def _project(x, W, BIAS, ks, kmask, cols, colmask, ldw, PRECISION: tl.constexpr):
    # x [rows, K] @ W[ks, cols] + BIAS[cols], FP32 (W row-major with ``ldw`` columns)
    w = tl.load(W + ks[:, None] * ldw + cols[None, :], mask=kmask[:, None] & colmask[None, :], other=0.0)
    bias = tl.load(BIAS + cols, mask=colmask, other=0.0).to(tl.float32)
    return tl.dot(x, w, input_precision=PRECISION) + bias[None, :]


@triton.jit
def _project_tma(x, WD, BIAS, col0, cols, colmask, PRECISION: tl.constexpr):
    # as _project, the weight tile arriving through a tensor descriptor (TMA): straight into shared
    # memory, where wgmma reads it, instead of through registers and L1 (which a profile of the first
    # kernel found 70% busy while DRAM was 24%); rows and columns past W's edge arrive as zeros
    bias = tl.load(BIAS + cols, mask=colmask, other=0.0).to(tl.float32)
    return tl.dot(x, WD.load([0, col0]), input_precision=PRECISION) + bias[None, :]


@triton.jit
def _in_kernel(
    Z, GAMMA, BETA, W, BIAS, M, AT, BT, G,  # z [B NN, C], w_in [C, 4H + C], the mask [B NN]; a, b [B, H, NN]; g [B NN, C]
    WD2, WD1, WB, WG,  # with TMA: descriptors over w_in (tiles [WIDTH, 2 CHUNK], or 4 CHUNK with AB, and [WIDTH,
    # GCHUNK]), b's and g's first column in its padded copy (with AB the bias is padded alike)
    AD, BD, GD,  # with TSTORE: descriptors over a, b [B, H, NN] and g [B, NN, C], tiles of one complex
    NN, C, H, eps,  # NN = N^2 pairs a complex
    BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, CHUNK: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
    JOIN: tl.constexpr, TMA: tl.constexpr, TSTORE: tl.constexpr, SIG: tl.constexpr,
    GATE: tl.constexpr,  # the output gate here (else the last kernel computes it from z: FIN_ZGATE)
    AB: tl.constexpr, GCHUNK: tl.constexpr,  # a's and b's chunk in one tile (IN_AB); the gate's chunk (IN_GC)
    LNFAST: tl.constexpr = False,  # IN_LNFAST: its LayerNorm unscaled where a tile's rows allow
):
    rows, cm, rmask, nn = _pairs(NN, H, BLOCK_R, OFFS_64)
    cs = tl.arange(0, WIDTH)
    cmask = cs < C
    zn = _layernorm_rows(Z + rows[:, None] * C + cs[None, :], rmask[:, None] & cmask[None, :], GAMMA, BETA,
                         cs, cmask, C, eps, CENTER=not BF16, FAST=LNFAST)
    zn = _round(zn, BF16, EMULATE)  # the GEMM's operand, rounded once as the steps road stores it
    m = tl.load(M + rows, mask=rmask, other=0.0).to(tl.float32)
    ldw = 4 * H + C
    cx, p0 = _tile_origin(tl.program_id(0), NN, BLOCK_R)  # the descriptors' coordinates of its tiles (TSTORE)
    for h0 in range(0, H, CHUNK):
        hs = h0 + tl.arange(0, CHUNK)
        hmask = hs < H
        dst = cm[:, None] + hs[None, :] * nn
        smask = rmask[:, None] & hmask[None, :]
        if AB:  # one tile, one wait and one dot for both: Triton waits on each load and each dot in turn, so
            # a chunk's two tiles had been two round trips to L2 in series (the compiled kernel's TTGIR)
            ps = 4 * h0 + tl.arange(0, 4 * CHUNK)
            p = _project_tma(zn, WD2, BIAS, 4 * h0, ps, ps < WG, PRECISION)
            pa, pb = tl.split(tl.permute(tl.reshape(p, (BLOCK_R, 2, 2 * CHUNK)), (0, 2, 1)))
            ga, va = tl.split(tl.reshape(pa, (BLOCK_R, CHUNK, 2)))
            gb, vb = tl.split(tl.reshape(pb, (BLOCK_R, CHUNK, 2)))
        elif JOIN:  # gate and value columns interleaved in W (see update): one dot of 2 CHUNK columns each
            ps = 2 * h0 + tl.arange(0, 2 * CHUNK)
            pmask = ps < 2 * H
            if TMA:  # the weights through descriptors (b's columns start at WB in their padded copy)
                pa = _project_tma(zn, WD2, BIAS, 2 * h0, ps, pmask, PRECISION)
                pb = _project_tma(zn, WD2, BIAS, WB + 2 * h0, 2 * H + ps, pmask, PRECISION)
            else:
                pa = _project(zn, W, BIAS, cs, cmask, ps, pmask, ldw, PRECISION)
                pb = _project(zn, W, BIAS, cs, cmask, 2 * H + ps, pmask, ldw, PRECISION)
            ga, va = tl.split(tl.reshape(pa, (BLOCK_R, CHUNK, 2)))
            gb, vb = tl.split(tl.reshape(pb, (BLOCK_R, CHUNK, 2)))
        else:
            ga = _project(zn, W, BIAS, cs, cmask, hs, hmask, ldw, PRECISION)
            va = _project(zn, W, BIAS, cs, cmask, H + hs, hmask, ldw, PRECISION)
            gb = _project(zn, W, BIAS, cs, cmask, 2 * H + hs, hmask, ldw, PRECISION)
            vb = _project(zn, W, BIAS, cs, cmask, 3 * H + hs, hmask, ldw, PRECISION)
        a = _round(_sigmoid(ga, SIG) * va * m[:, None], BF16, EMULATE)
        b = _round(_sigmoid(gb, SIG) * vb * m[:, None], BF16, EMULATE)
        if TSTORE:  # channel-major tiles written by TMA, clipped at the complex's H channels and NN pairs
            AD.store([cx, h0, p0], tl.reshape(tl.trans(a), (1, CHUNK, BLOCK_R)))
            BD.store([cx, h0, p0], tl.reshape(tl.trans(b), (1, CHUNK, BLOCK_R)))
        else:
            tl.store(AT + dst, a, mask=smask)
            tl.store(BT + dst, b, mask=smask)
    for c0 in range(0, C * GATE, GCHUNK):
        gs = c0 + tl.arange(0, GCHUNK)
        gmask = gs < C
        if TMA:
            g = _sigmoid(_project_tma(zn, WD1, BIAS, WG + c0, (WG if AB else 4 * H) + gs, gmask, PRECISION), SIG)
        else:
            g = _sigmoid(_project(zn, W, BIAS, cs, cmask, 4 * H + gs, gmask, ldw, PRECISION), SIG)
        if TSTORE:
            GD.store([cx, p0, c0], tl.reshape(_round(g, BF16, EMULATE), (1, BLOCK_R, GCHUNK)))
        else:
            tl.store(G + rows[:, None] * C + gs[None, :], _round(g, BF16, EMULATE),
                     mask=rmask[:, None] & gmask[None, :])


@triton.jit
def _out_kernel(
    O, GAMMA, BETA, W, BIAS, G, Y,  # o [B, H, NN] channel-major; w_out [H, C]; g, y [B NN, C]
    WD,  # with TMA: a descriptor over w_out, tiles [WIDTH, CHUNK]
    GD, YD,  # with GTMA: descriptors over g and y [B, NN, C], tiles [1, BLOCK_R, CHUNK] of one complex
    Z, GAMMA_IN, BETA_IN, WI, BI, WGD, WG,  # with ZGATE: z, the first LayerNorm, w_in and b_in as the first kernel
    # reads them (WGD: with TMA, a descriptor over their padded copy, tiles [CW, CHUNK]; WG: g's first column there)
    NN, C, H, eps,
    BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, CHUNK: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
    TMA: tl.constexpr, TRANS: tl.constexpr, GTMA: tl.constexpr,
    ZGATE: tl.constexpr, CW: tl.constexpr, SIG: tl.constexpr,  # the gate from g (0) or from z here, its weights by
    # pointer (1) or through WGD (2); C's tile width; the gate's sigmoid
    GATE_FIRST: tl.constexpr = False,  # the GPU MODE task's form: g [B NN, H] gates LN(o) before the projection
):
    rows, cm, rmask, nn = _pairs(NN, H, BLOCK_R, OFFS_64)
    cx, p0 = _tile_origin(tl.program_id(0), NN, BLOCK_R)  # the descriptors' coordinates of its tiles (GTMA)
    if ZGATE:  # z's rows normalised again, the values the first kernel multiplied: 2 C bytes a pair in where g's
        # round trip is 2 C out and 2 C in, yet slower on an H100, the kernel holding two tiles (kernels/NOTES.md)
        zs = tl.arange(0, CW)
        zmask = zs < C
        zn = _layernorm_rows(Z + rows[:, None] * C + zs[None, :], rmask[:, None] & zmask[None, :],
                             GAMMA_IN, BETA_IN, zs, zmask, C, eps, CENTER=not BF16)
        zn = _round(zn, BF16, EMULATE)
    hs = tl.arange(0, WIDTH)
    hmask = hs < H
    # a channel's BLOCK_R pairs are contiguous in o: each load is runs along the rows
    if TRANS:  # the tile as o lies, [channels, pairs], normalised down its columns and handed to the dot
        # transposed: a profile found the [pairs, channels] tile's change of layout 5-6-way bank-conflicted
        on = _layernorm_rows(O + hs[:, None] * nn + cm[None, :], hmask[:, None] & rmask[None, :], GAMMA, BETA,
                             hs, hmask, H, eps, AXIS=0, CENTER=not BF16)
        on = tl.trans(_round(on, BF16, EMULATE))
    else:
        on = _layernorm_rows(O + cm[:, None] + hs[None, :] * nn, rmask[:, None] & hmask[None, :], GAMMA, BETA,
                             hs, hmask, H, eps, CENTER=not BF16)
        on = _round(on, BF16, EMULATE)
    if GATE_FIRST:  # (C == H here: g's rows are H wide) the product of two stored values, stored once more
        gf = tl.load(G + rows[:, None] * C + hs[None, :], mask=rmask[:, None] & hmask[None, :], other=0.0)
        on = _round(on.to(tl.float32) * gf.to(tl.float32), BF16, EMULATE)
    for c0 in range(0, C, CHUNK):
        cs = c0 + tl.arange(0, CHUNK)
        cmask = cs < C
        mask = rmask[:, None] & cmask[None, :]
        if TMA:
            y = _project_tma(on, WD, BIAS, c0, cs, cmask, PRECISION)
        else:
            y = _project(on, W, BIAS, hs, hmask, cs, cmask, C, PRECISION)
        if GATE_FIRST:
            g = 1.0
        elif ZGATE == 2:
            g = _sigmoid(_project_tma(zn, WGD, BI, WG + c0, 4 * H + cs, cmask, PRECISION), SIG)
        elif ZGATE == 1:
            g = _sigmoid(_project(zn, WI, BI, zs, zmask, 4 * H + cs, cmask, 4 * H + C, PRECISION), SIG)
        elif GTMA:  # the gate through shared memory in the layout the product's tile has (a profile found the
            # pointer load's change of layout, through shared memory, 8-way bank-conflicted), y out the same way
            g = tl.reshape(GD.load([cx, p0, c0]), (BLOCK_R, CHUNK)).to(tl.float32)
        else:
            g = tl.load(G + rows[:, None] * C + cs[None, :], mask=mask, other=0.0).to(tl.float32)
        if GTMA:
            YD.store([cx, p0, c0], tl.reshape(_round(y * g, BF16, EMULATE), (1, BLOCK_R, CHUNK)))
        else:
            tl.store(Y + rows[:, None] * C + cs[None, :], _round(y * g, BF16, EMULATE), mask=mask)
# </kernel>


def update(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out, out, c: dict,
           launch: dict, sdt, gate_first: bool = False) -> torch.Tensor:
    """The update into ``out`` by this road; ``sdt``: the dtype the kernels store (FP32 under the
    interpreter at bf16: see triton_block.trimul_block). ``gate_first``: the GPU MODE task's form (its output
    gate multiplies LN(o) before the output projection); its caller passes C == H, the weights in this block's
    layout, zero biases, and a config whose last kernel reads g (not FIN_ZGATE, not FIN_PIPE)."""
    N, C, H = z.shape[-3], z.shape[-1], gamma_out.shape[0]
    B = z.shape[0] if z.dim() == 4 else 1
    R, NN = B * N * N, N * N
    bf16, emulate = z.dtype == torch.bfloat16, sdt != z.dtype
    zc, m = z.reshape(R, C).to(sdt).contiguous(), mask.reshape(R).to(sdt).contiguous()
    gi, bi, wi, bb, go, bo, wo, bbo = (t.to(sdt).contiguous() for t in
                                       (gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out))
    wi, bb, wd2, wd1, wb, wg = first_weights(w_in, b_in, wi, bb, C, H, c, _width(C))
    at = torch.empty((B, H, N, N), dtype=sdt, device=z.device)
    bt, o = torch.empty_like(at), torch.empty_like(at)
    zgate = c["FIN_ZGATE"]  # the gate computed by the last kernel: no g between the kernels
    g = None if zgate else torch.empty((R, C), dtype=sdt, device=z.device)
    offs_64 = max(at.numel(), R * C) >= common.INT32_LIMIT
    flags = dict(BF16=bf16, EMULATE=emulate, PRECISION="ieee" if bf16 else "tf32x3", OFFS_64=offs_64)
    ad, bd, gd = (None,) * 3 if c["IN_FOLD"] else store_descriptors(at, bt, g, B, NN, C, H, c)  # IN_FOLD: its own
    tiles = B * common.cdiv(NN, c["IN_R"])
    if c["IN_CM"]:  # the products formed [channels, pairs], as a and b lie
        cmk.first(zc, m, gi, bi, w_in, b_in, wi, bb, at, bt, g, (ad, bd, gd), NN, C, H, EPS, c, _width(C), flags,
                  _sig(c))
    elif c["IN_FOLD"]:  # the LayerNorm folded into the projection: a GEMM on z as it lies
        fold.first(zc, m, w_in, b_in, gamma_in, beta_in, at, bt, g, B, NN, C, H, EPS, c, _width(C), flags, _sig(c))
    elif c["IN_PIPE"]:  # persistent, w_in held in shared memory, z's tiles pipelined
        pipe.first(zc, m, gi, bi, bb, at, bt, g, wd2, wd1, wg, NN, C, H, EPS, c, _width(C), flags, _sig(c))
    elif c["IN_RESIDENT"]:  # persistent, w_in loaded once a program
        n = res.programs(tiles, z.device)
        res._in_resident_kernel[(n,)](zc, gi, bi, wi, bb, m, at, bt, g, NN, C, H, EPS, tiles, NUM_PROGRAMS=n,
                                      BLOCK_R=c["IN_R"], CW=_width(C), HW=_width(H),
                                      num_warps=c["IN_WARPS"], num_stages=c["F_STAGES"], **flags)
    else:
        first_grid(zc, m, gi, bi, wi, bb, at, bt, g, (wd2, wd1, wb, wg), (ad, bd, gd), NN, C, H, c, flags)
    _contract(at, bt, o, c, launch, offs_64)
    if emulate:
        o.copy_(o.to(z.dtype))  # the GPU stores o in bf16: the same values, rounded to nearest even
    direct = sdt == z.dtype  # the last kernel writes ``out`` itself (not under the interpreter at bf16)
    y = out.view(R, C) if direct else torch.empty((R, C), dtype=sdt, device=z.device)
    wdo = out_weights(w_out, wo, C, c, _width(H))
    gdo, ydo = (None, None) if zgate else gate_descriptors(g, y, B, NN, C, c)
    # with ZGATE and both kernels' weights through descriptors (wd1: IN_TMA's), the gate's columns come through one
    wgd = gate_weights(wd1, _width(C), c) if zgate and c["FIN_TMA"] and wd1 is not None else None
    if c["FIN_PIPE"]:  # persistent, w_out held in shared memory, o's and g's tiles pipelined
        pipe.last(o, go, bo, bbo, g, y, wdo, (zc, gi, bi, bb, wd1, wg) if zgate else None, NN, C, H, EPS, c,
                  _width(H), _width(C), flags, _sig(c))
    else:
        _out_kernel[(B * common.cdiv(NN, c["FIN_R"]),)](
            o, go, bo, wo, bbo, y if zgate else g, y, wdo, gdo, ydo, zc, gi, bi, wi, bb, wgd, wg, NN, C, H, EPS,
            BLOCK_R=c["FIN_R"], WIDTH=_width(H), CHUNK=c["FIN_C"], TMA=c["FIN_TMA"], TRANS=c["FIN_T"],
            GTMA=gdo is not None, ZGATE=0 if not zgate else 1 if wgd is None else 2, CW=_width(C), SIG=_sig(c),
            GATE_FIRST=gate_first, num_warps=c["FIN_WARPS"], num_stages=c["F_STAGES"], **flags)
    if not direct:
        out.view(R, C).copy_(y)  # bf16 values already: an exact copy
    return out


def first_grid(zc, m, gi, bi, wi, bb, at, bt, g, wds, sds, NN, C, H, c: dict, flags: dict) -> None:
    """``_in_kernel`` into a, b and g (None: FIN_ZGATE); ``wds``, ``sds``: first_weights' and store_descriptors'."""
    (wd2, wd1, wb, wg), (ad, bd, gd) = wds, sds
    _in_kernel[(at.shape[0] * common.cdiv(NN, c["IN_R"]),)](
        zc, gi, bi, wi, bb, m, at, bt, at if g is None else g, wd2, wd1, wb, wg, ad, bd, gd, NN, C, H, EPS,
        BLOCK_R=c["IN_R"], WIDTH=_width(C), CHUNK=c["IN_H"], JOIN=c["IN_JOIN"], TMA=c["IN_TMA"], TSTORE=ad is not None,
        SIG=_sig(c), GATE=g is not None, AB=c["IN_AB"], GCHUNK=c["IN_GC"] or c["IN_H"], LNFAST=c["IN_LNFAST"],
        num_warps=c["IN_WARPS"], num_stages=c["F_STAGES"], **_maxnreg(c), **flags)


def _maxnreg(c: dict) -> dict:
    """The first kernel's register ceiling as a launch option, where the config sets one."""
    return {"maxnreg": c["IN_MAXNREG"]} if c["IN_MAXNREG"] else {}


def _sig(c: dict) -> str:
    """The first kernel's sigmoid: the config's, but the exact one under the interpreter, which cannot run
    inline PTX (the approximations are checked on the GPU only)."""
    return "exact" if common.interpreting() else c["IN_SIG"]


def _width(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _contract(at, bt, o, c: dict, launch: dict, offs_64: bool) -> None:
    """o[b, h] = at[b, h] bt[b, h]^T for every complex b and channel h."""
    B, H, N, _ = at.shape
    if c["BMM"] == "cublas":
        torch.matmul(at, bt.transpose(-1, -2), out=o)  # TF32 off: the launcher set IEEE FP32
        return
    bc = c["BLOCK_C"]
    grid = (common.cdiv(N, c["BLOCK_I"]) * common.cdiv(N, c["BLOCK_J"]) * common.cdiv(H, bc),)
    for b in range(B):
        view = o[b].permute(1, 2, 0)  # (i, j, h) strides of the channel-major output
        if c["CONTRACT_TMA"] and tma_road.ready(at[b], bt[b]):  # persistent, operands by TMA (as the steps road)
            tma_road.contract(at[b], bt[b], view, c, launch, offs_64)
            continue
        road._batched_gemm_kernel[grid](at[b], bt[b], view, N, H, *view.stride(), BLOCK_I=c["BLOCK_I"],
                                        BLOCK_J=c["BLOCK_J"], BLOCK_K=c["BLOCK_K"], BLOCK_C=bc,
                                        GROUP_I=c["GROUP_I"], K_INNER=True, PRECISION=c["CONTRACT"],
                                        OFFS_64=offs_64, **launch)
