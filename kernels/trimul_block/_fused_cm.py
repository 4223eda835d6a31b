"""The fused road's first kernel in the contraction's orientation (config key ``IN_CM``).

The grid kernel (``_fused._in_kernel``) forms a chunk of projections as [pairs, channels], p = LN(z) w, and
stores a and b channel-major, [B, H, N^2], which is the transpose of that tile. The transpose is a change of
layout through shared memory, and a source-level profile of that kernel on an H100 found its shared-memory
stores 10.7-way bank-conflicted and its integer pipe the busiest (kernels/NOTES.md). Here the same numbers are
formed as [channels, pairs], p^T = w^T LN(z)^T: a chunk's gate rows and value rows are separate products, so
no gate/value split either, and each accumulator row is one channel's pairs, already in the order a and b
lie in memory. w^T's tiles arrive by TMA K-major (the tensor cores' own order for their first operand);
LN(z)^T is the normalised tile handed to the tensor cores transposed, which on Hopper is a choice of shared-
memory descriptor, not a data movement. The output gate stays pair-major, [B N^2, C], as the last kernel
reads it: there LN(z) is the first operand and w^T's gate tile, transposed, the second.

Rows of w^T past a section's end (H not a multiple of the chunk) read the next section's weights (IN_CM=1) or
zero rows (IN_CM=2, whose sections are padded to whole chunks): their products are never stored (the pointer
stores are masked, the descriptors clip at H). Columns of w^T past C arrive as zeros, matching the normalised
tile's zero padding.

Measured on an H100 at N = 1024, no form was faster than the grid kernel (576-798 us against 564-569): the
transpose's bank conflicts left, and the kernel stayed as latency-bound as before (kernels/NOTES.md). The configs
stay in the table as measured, and no rule picks them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ._fused_rows import _layernorm_rows, _pairs, _round, _sigmoid, _tile_origin
from ._fused_weights import _cached


# <kernel>
@triton.jit
def _rows(WT, BIAS, r0, CHUNK: tl.constexpr, znt, PRECISION: tl.constexpr):
    # rows r0 .. r0 + CHUNK of w^T LN(z)^T + bias: [CHUNK, pairs] (bias read within w^T's row count, which the
    # padded bias has)
    bias = tl.load(BIAS + r0 + tl.arange(0, CHUNK)).to(tl.float32)
    return tl.dot(WT.load([r0, 0]), znt, input_precision=PRECISION) + bias[:, None]


@triton.jit
def _gated(WT, BIAS, r0, CHUNK: tl.constexpr, znt, SIG: tl.constexpr, PRECISION: tl.constexpr):
    # a chunk of CHUNK channels from one product of 2 CHUNK rows whose blocks of 8 are gates then values
    # (ROWS8): a thread of a warpgroup's accumulator holds rows r and r + 8, so the split is its own registers
    p = _rows(WT, BIAS, r0, 2 * CHUNK, znt, PRECISION)
    g, v = tl.split(tl.permute(tl.reshape(p, (CHUNK // 8, 2, 8, p.shape[1])), (0, 2, 3, 1)))
    return tl.reshape(_sigmoid(g, SIG) * v, (CHUNK, p.shape[1]))


@triton.jit
def _in_cm_kernel(
    Z, GAMMA, BETA, BIAS, M, AT, BT, G,  # z [B NN, C]; the bias padded as w^T's rows; the mask [B NN]; a, b, g
    WT, WTG,  # descriptors over w^T [4H + C, C] (rows: a's gates, a's values, b's, b's, the output gate's), tiles
    # [CHUNK, WIDTH] and [GCHUNK, WIDTH]
    AD, BD, GD,  # with TSTORE: descriptors over a, b [B, H, NN] and g [B, NN, C], tiles of one complex
    NN, C, H, eps, HB, HG,  # b's and the output gate's first row of w^T
    BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, CHUNK: tl.constexpr, GCHUNK: tl.constexpr, ROWS8: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
    SIG: tl.constexpr, TSTORE: tl.constexpr,
):
    rows, cm, rmask, nn = _pairs(NN, H, BLOCK_R, OFFS_64)
    cx, p0 = _tile_origin(tl.program_id(0), NN, BLOCK_R)  # the descriptors' coordinates of its tiles (TSTORE)
    cs = tl.arange(0, WIDTH)
    cmask = cs < C
    zn = _layernorm_rows(Z + rows[:, None] * C + cs[None, :], rmask[:, None] & cmask[None, :], GAMMA, BETA,
                         cs, cmask, C, eps, CENTER=not BF16)
    zn = _round(zn, BF16, EMULATE)  # the GEMM's operand, rounded once as the steps road stores it
    znt = tl.trans(zn)
    m = tl.load(M + rows, mask=rmask, other=0.0).to(tl.float32)
    for h0 in range(0, H, CHUNK):
        hs = h0 + tl.arange(0, CHUNK)
        smask = (hs < H)[:, None] & rmask[None, :]
        dst = cm[None, :] + hs[:, None] * nn
        if ROWS8:
            a = _gated(WT, BIAS, 2 * h0, CHUNK, znt, SIG, PRECISION)
        else:
            a = _sigmoid(_rows(WT, BIAS, h0, CHUNK, znt, PRECISION), SIG) * _rows(WT, BIAS, H + h0, CHUNK, znt,
                                                                                  PRECISION)
        a = _round(a * m[None, :], BF16, EMULATE)
        if TSTORE:
            AD.store([cx, h0, p0], tl.reshape(a, (1, CHUNK, BLOCK_R)))
        else:
            tl.store(AT + dst, a, mask=smask)
        if ROWS8:
            b = _gated(WT, BIAS, HB + 2 * h0, CHUNK, znt, SIG, PRECISION)
        else:
            b = _sigmoid(_rows(WT, BIAS, 2 * H + h0, CHUNK, znt, PRECISION), SIG) * _rows(WT, BIAS, 3 * H + h0, CHUNK,
                                                                                          znt, PRECISION)
        b = _round(b * m[None, :], BF16, EMULATE)
        if TSTORE:
            BD.store([cx, h0, p0], tl.reshape(b, (1, CHUNK, BLOCK_R)))
        else:
            tl.store(BT + dst, b, mask=smask)
    for c0 in range(0, C, GCHUNK):
        gs = c0 + tl.arange(0, GCHUNK)
        bias = tl.load(BIAS + HG + gs).to(tl.float32)
        g = tl.dot(zn, tl.trans(WTG.load([HG + c0, 0])), input_precision=PRECISION) + bias[None, :]
        g = _round(_sigmoid(g, SIG), BF16, EMULATE)
        if TSTORE:
            GD.store([cx, p0, c0], tl.reshape(g, (1, BLOCK_R, GCHUNK)))
        else:
            tl.store(G + rows[:, None] * C + gs[None, :], g, mask=rmask[:, None] & (gs < C)[None, :])
# </kernel>


def weights(w_in, b_in, wi, bb, C: int, H: int, chunk: int, gchunk: int, width: int, rows8: bool):
    """(descriptor over w^T for a's and b's tiles; over the same for the gate's, [gchunk, width]; the bias laid out
    as w^T's rows; b's first row; the gate's first row), kept while the weights live unchanged. Rows: a's gates,
    a's values, b's, b's (tiles [chunk, width]), or with ``rows8`` each chunk of a (then b) as blocks of 8 gate rows
    and their 8 value rows (tiles [2 chunk, width]; H padded to whole chunks with zero rows); then the output
    gate's. Columns padded to 16 bytes (TMA's rows); rows past the end, which the last tiles reach, are zero."""
    def make():
        pad, box = 16 // wi.element_size(), 2 * chunk if rows8 else chunk
        hp = -(-H // chunk) * chunk if rows8 else H
        hg = 4 * hp
        rows = hg + C + max(box, gchunk)
        w, b = wi.t(), bb
        if rows8:  # row k 2 chunk + 16 j + t: gate of channel k chunk + 8 j + t; + 8: its value
            h = torch.arange(hp, device=wi.device)
            at = (h // 8) * 16 + h % 8
            keep = h < H
            cs = torch.arange(C, device=h.device)
            src = torch.cat((h[keep], H + h[keep], 2 * H + h[keep], 3 * H + h[keep], 4 * H + cs))
            dst = torch.cat((at[keep], at[keep] + 8, 2 * hp + at[keep], 2 * hp + at[keep] + 8, hg + cs))
        else:
            src = dst = torch.arange(4 * H + C, device=wi.device)
        wt = torch.zeros((rows, -(-C // pad) * pad), dtype=wi.dtype, device=wi.device)
        bp = torch.zeros(rows, dtype=bb.dtype, device=bb.device)
        wt[dst, :C], bp[dst] = w[src], b[src]
        return (TensorDescriptor(wt, [rows, C], [wt.stride(0), 1], [box, width]),
                TensorDescriptor(wt, [rows, C], [wt.stride(0), 1], [gchunk, width]), bp, 2 * hp if rows8 else 2 * H, hg)
    key = ("cm", id(w_in), id(b_in), chunk, gchunk, rows8, wi.dtype, wi.device)
    return _cached(key, (w_in, b_in), make)


def first(zc, m, gamma, beta, w_in, b_in, wi, bb, at, bt, g, stores, NN: int, C: int, H: int, eps: float,
          c: dict, width: int, flags: dict, sig: str) -> None:
    """The first kernel's work by this road: a, b [B, H, NN] and g [B NN, C] from z [B NN, C]; ``stores``: the
    grid kernel's descriptors over a, b and g (``_fused_weights.store_descriptors``: the same tiles), or Nones."""
    r, chunk, gchunk, rows8 = c["IN_R"], c["IN_H"], c["IN_GC"] or c["IN_H"], c["IN_CM"] == 2
    wt, wtg, bp, hb, hg = weights(w_in, b_in, wi, bb, C, H, chunk, gchunk, width, rows8)
    ad, bd, gd = stores
    B = at.shape[0]
    _in_cm_kernel[(B * triton.cdiv(NN, r),)](zc, gamma, beta, bp, m, at, bt, g, wt, wtg, ad, bd, gd, NN, C, H, eps, hb,
                                             hg, BLOCK_R=r, WIDTH=width, CHUNK=chunk, GCHUNK=gchunk, ROWS8=rows8,
                                             SIG=sig, TSTORE=ad is not None, num_warps=c["IN_WARPS"], num_stages=1,
                                             **flags)
