"""The fused road's first kernel with the LayerNorm folded into the projection (config key ``IN_FOLD``, bf16).

For a pair's row z with mean mu and reciprocal deviation r, LayerNorm then the projection is

    LN(z) w + bias = r (z w') - r mu s + t,   w' = diag(gamma) w,  s = colsum(w'),  t = beta w + bias,

so the GEMM can run on z as it lies in memory and the normalisation moves to the epilogue, two FMAs an
output. Why: a source-level profile of the grid kernel (``_fused._in_kernel``, kernels/NOTES.md) found it
instruction-bound, its integer pipe the busiest: the pointer loads of z, the LayerNorm's scaling of every
element and the normalised copy's trip from registers back to shared memory for the tensor cores. Here z's
tile arrives by TMA and wgmma reads it from shared memory as it came; the row statistics are read from the
same tile. A program takes one tile of pairs and one tile of BN columns (a's gates and values interleaved,
b's, or the output gate's), the programs of one tile of pairs consecutive, so z is read from DRAM once and
from L2 after; or, with ``IN_FOLD_LOOP``, every column tile of its pairs in turn, z's tile and its statistics
formed once (the grid kernel's shape), w' tiles pipelined in that many stages.

Rounding: w' is rounded to bf16 once, where the grid kernel rounds the normalised z; s is summed from the
rounded w', so the mean's share cancels as it would exactly. What is left is FP32's accumulation on
r (z w') - r mu s, an error of about 2^-24 |mu| r times the weights' scale: under 2^-15 of it while
|mu| r <= 64, the bound a tile's rows must keep (``CANCEL``). A tile with a row past it (far from zero for its
spread; a constant row, whose r is 1/sqrt(eps)), or with a row past 1e18 (z w' could overflow), multiplies
its rows' scaled deviations instead, rounded to bf16 as the grid kernel rounds its normalised rows: a review
found constant rows of 1000 off by 0.37 without this. bf16 only: at FP32 the road's projections are tf32x3,
and w' rounded to TF32 would cost the accuracy that road exists for.

Measured on an H100 at N = 1024, every form was 2.1-2.8x slower than the grid kernel (kernels/NOTES.md): the
configs stay in the table as measured, and no rule picks them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.layernorm.triton_kernel import _down_scale, _rstd

from ._fused_rows import _round, _sigmoid, _tile_origin, _tile_pairs
from ._fused_weights import _cached, per_complex


# <kernel>
@triton.jit
def _in_fold_kernel(
    Z, ZD, WD, S, T, M, AT, BT, G,  # z [B NN, C] (ZD: a descriptor over it, or None), w' [C, cols] as WD's tiles;
    # s and t [cols]; the mask [B NN]; a, b [B, H, NN] and g [B NN, C]
    AD, BD, GD,  # with TSTORE: descriptors over a, b and g, tiles of one complex
    NN, C, H, eps, n_ab, n_cols,  # column tiles of a (of b alike) and in all
    BLOCK_R: tl.constexpr, CW: tl.constexpr, BN: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, SIG: tl.constexpr, OFFS_64: tl.constexpr,
    ZTMA: tl.constexpr, TSTORE: tl.constexpr, LOOP: tl.constexpr, STAGES: tl.constexpr,
    CANCEL: tl.constexpr = 64.0,  # the largest |mu| r a tile's rows may have and take the folded product
):
    pid = tl.program_id(0)
    if LOOP:  # a program takes every column tile of its pairs: z loaded and its statistics formed once
        tile, j0, j1 = pid, 0, n_cols
    else:  # one column tile a program, the fastest index, so a tile of pairs' programs run side by side
        tile, j0 = pid // n_cols, pid % n_cols
        j1 = j0 + 1
    rows, cm, rmask, nn = _tile_pairs(tile, NN, H, BLOCK_R, OFFS_64)
    cx, p0 = _tile_origin(tile, NN, BLOCK_R)  # z's descriptor coordinates (ZTMA)
    cs = tl.arange(0, CW)
    cmask = cs < C
    if ZTMA:  # rows past the complex and channels past C arrive as zeros
        z = tl.reshape(ZD.load([cx, p0, 0]), (BLOCK_R, CW))
    else:
        z = tl.load(Z + rows[:, None] * C + cs[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)
    # the row's statistics, scaled first by a power of two below its largest value as the project's
    # LayerNorm does (squares past 2^64 would overflow); mean and 1/std back in z's units, exactly. A constant
    # row has no spread, even scaled: its 1/std is 1/sqrt(eps) (in scaled units eps sc^2 can underflow to 0)
    x = z.to(tl.float32)
    sc = _down_scale(tl.max(tl.abs(x), axis=1))
    xs = x * sc[:, None]
    mean = tl.sum(xs, axis=1) / C  # scaled
    d = tl.where(cmask[None, :], xs - mean[:, None], 0.0)
    var = tl.sum(d * d, axis=1) / C
    rs, r = _rstd(var, sc, eps)  # 1/std in the scaled units and in z's
    rm = r * (mean / sc)
    m = tl.load(M + rows, mask=rmask, other=0.0).to(tl.float32)
    # r (z w') - r mu s cancels where |mu| r is large (a row far from zero for its spread, a constant one):
    # FP32's accumulation error grows by that factor. And z w' overflows for rows far past 1e18 (the bound).
    # A tile with such a row multiplies its rows' scaled deviations instead, rs (d w'), d rounded to bf16 as
    # the grid kernel rounds its normalised rows: no cancellation, no overflow, and a register trip that
    # tiles of ordinary rows skip
    center = (tl.max(tl.abs(rm)) > CANCEL) | (tl.min(sc) < 1e-18)
    for j in tl.range(j0, j1, num_stages=STAGES):
        col0 = j * BN
        cols = col0 + tl.arange(0, BN)
        w = WD.load([0, col0])
        if center:  # the deviations formed again from z's tile here, so none are held through the loop (registers)
            dc = tl.where(cmask[None, :], z.to(tl.float32) * sc[:, None] - mean[:, None], 0.0)
            y = tl.dot(_round(dc, BF16, EMULATE).to(z.dtype), w, input_precision="ieee") * rs[:, None]
            y += tl.load(T + cols)[None, :]
        else:
            acc = tl.dot(z, w, input_precision="ieee")
            y = acc * r[:, None] + (tl.load(T + cols)[None, :] - rm[:, None] * tl.load(S + cols)[None, :])
        if j < 2 * n_ab:  # a's or b's: gate and value columns interleaved, gated, masked, stored channel-major
            side = j // n_ab
            h0 = (j - side * n_ab) * (BN // 2)
            gt, vt = tl.split(tl.reshape(y, (BLOCK_R, BN // 2, 2)))
            v = _round(_sigmoid(gt, SIG) * vt * m[:, None], BF16, EMULATE)
            if TSTORE:
                vt3 = tl.reshape(tl.trans(v), (1, BN // 2, BLOCK_R))
                if side == 0:
                    AD.store([cx, h0, p0], vt3)
                else:
                    BD.store([cx, h0, p0], vt3)
            else:
                hs = h0 + tl.arange(0, BN // 2)
                dst = cm[:, None] + hs[None, :] * nn
                smask = rmask[:, None] & (hs < H)[None, :]
                if side == 0:
                    tl.store(AT + dst, v, mask=smask)
                else:
                    tl.store(BT + dst, v, mask=smask)
        else:  # the output gate's columns
            c0 = (j - 2 * n_ab) * BN
            g = _round(_sigmoid(y, SIG), BF16, EMULATE)
            if TSTORE:
                GD.store([cx, p0, c0], tl.reshape(g, (1, BLOCK_R, BN)))
            else:
                gs = c0 + tl.arange(0, BN)
                tl.store(G + rows[:, None] * C + gs[None, :], g, mask=rmask[:, None] & (gs < C)[None, :])
# </kernel>


def weights(w_in, b_in, gamma, beta, sdt, C: int, H: int, bn: int, cw: int):
    """(descriptor over w' [C, cols], s, t, column tiles of a, all column tiles), kept while the weights
    live unchanged. Columns: a's gates and values interleaved (gate 0, value 0, gate 1, ...) and padded to
    whole tiles, b's alike, then the output gate's, padded; padding is zero and never stored."""
    def make():
        ha, cg = -(-H // (bn // 2)) * (bn // 2), -(-C // bn) * bn
        w = w_in.detach().double()
        wp = torch.zeros((C, 4 * ha + cg), dtype=torch.float64, device=w.device)
        tp = torch.zeros(wp.shape[1], dtype=torch.float64, device=w.device)
        t = beta.detach().double() @ w + b_in.detach().double()
        for side in (0, 1):  # a, b: gate columns [side 2H, side 2H + H), values after them
            base = 2 * ha * side
            for k, src in ((0, 2 * H * side), (1, 2 * H * side + H)):
                wp[:, base + k:base + 2 * H:2], tp[base + k:base + 2 * H:2] = w[:, src:src + H], t[src:src + H]
        wp[:, 4 * ha:4 * ha + C], tp[4 * ha:4 * ha + C] = w[:, 4 * H:], t[4 * H:]
        # w' rounded as the GPU stores it (under the interpreter FP32 holding bf16's values); s from the rounded w'
        wr = (gamma.detach().double()[:, None] * wp).to(torch.bfloat16)
        s = wr.double().sum(0)
        wr = wr.to(sdt).contiguous()
        wd = TensorDescriptor(wr, list(wr.shape), [wr.stride(0), 1], [cw, bn])
        return wd, s.float().contiguous(), tp.float().contiguous(), 2 * ha // bn, wr.shape[1] // bn
    key = ("fold", id(w_in), id(b_in), id(gamma), id(beta), bn, sdt, w_in.device)
    return _cached(key, (w_in, b_in, gamma, beta), make)


def first(zc, m, w_in, b_in, gamma, beta, at, bt, g, B: int, NN: int, C: int, H: int, eps: float, c: dict,
          cw: int, flags: dict, sig: str) -> None:
    """The first kernel's work by this road: a, b [B, H, NN] and g [B NN, C] from z [B NN, C]."""
    bn = c["IN_FOLD"]
    wd, s, t, n_ab, n_cols = weights(w_in, b_in, gamma, beta, zc.dtype, C, H, bn, cw)
    # TMA needs 16-byte rows and base; elsewhere (odd C, an offset view) z by pointer
    ztma = (C * zc.element_size()) % 16 == 0 and zc.data_ptr() % 16 == 0 and zc.is_contiguous()
    zd = per_complex(zc, B, NN, C, c["IN_R"], cw) if ztma else None
    ad = bd = gd = None
    es = at.element_size()
    if c["IN_TSTORE"] and (NN * es) % 16 == 0 and (C * es) % 16 == 0:  # TMA's 16-byte rows; else by pointer
        r = c["IN_R"]
        ad, bd, gd = (per_complex(at, B, H, NN, bn // 2, r), per_complex(bt, B, H, NN, bn // 2, r),
                      per_complex(g, B, NN, C, r, bn))
    loop = c["IN_FOLD_LOOP"]
    grid = (B * triton.cdiv(NN, c["IN_R"]) * (1 if loop else n_cols),)
    _in_fold_kernel[grid](zc, zd, wd, s, t, m, at, bt, g, ad, bd, gd, NN, C, H, eps, n_ab, n_cols,
                          BLOCK_R=c["IN_R"], CW=cw, BN=bn, SIG=sig, ZTMA=ztma, TSTORE=ad is not None,
                          LOOP=loop > 0, STAGES=max(loop, 1),
                          num_warps=c["IN_WARPS"], num_stages=1,
                          **{k: v for k, v in flags.items() if k != "PRECISION"})
