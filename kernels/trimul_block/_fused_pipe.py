"""The fused road's first kernel, persistent, w_in held in shared memory and z's tiles pipelined (config key
``IN_PIPE``: the pipeline's stages; bf16, C and H at most 128); and its last kernel in the same shape (``FIN_PIPE``:
w_out held, o's and g's tiles pipelined). Measured on an H100 at N = 1024, both are about twice as slow as the grid
kernels they replace (1,165 against 570 us; 692 against 343): the grid kernel's L2 was 48% busy, so its weight reads
were not what held it, and one program an SM covers less of its waits on z than four (kernels/NOTES.md).

Two changes that took work out of the grid first kernel (``_fused._in_kernel``) left its time where it was
(kernels/NOTES.md, the session of 2026-12-07 from 01:53): a program of IN_R pairs waits in series for its z tile
from DRAM, for each of six weight tiles from L2 (160 KB for 16 KB of z at 128 channels: 2.6 GB a call at N = 1024)
and for each product, and the four programs an SM cover only part of it. cuEquivariance's projection kernel, 1.3x
faster per byte, is persistent with 230 KB of shared memory a block. Here one program an SM loads w_in once by
TMA, IN_AB's four tiles of a's and b's columns and the gate's, which stay in shared memory where the tensor cores
read them, and walks the tiles pid, pid + #programs, ...; the loop over tiles is software-pipelined (``tl.range``'s
stages), so z's tile for a later step arrives (cp.async) while this step normalises, multiplies and stores.
``IN_RESIDENT`` held w_in too but loaded z in series and formed each product whole (255 registers), and was slower
than the grid kernel.

The same formula as the grid kernel's IN_AB path: the LayerNorm, the products against the same padded weights and
bias, the same gates and roundings; the gate's columns as one product instead of chunks.
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ._fused_resident import programs  # one program an SM: w_in fills most of its shared memory
from ._fused_rows import _layernorm_tile, _round, _sigmoid, _tile_pairs


# <kernel>
@triton.jit
def _ab_chunk(zn, w, BIAS, WG, AT, BT, m, cm, rmask, nn, H, h0: tl.constexpr, BLOCK_R: tl.constexpr,
              CHUNK: tl.constexpr, BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr,
              SIG: tl.constexpr):
    # channels h0 .. h0 + CHUNK of a and b: one product against w's tile (a's gates and values interleaved,
    # then b's: IN_AB's order), gated, masked and stored channel-major
    hs = h0 + tl.arange(0, CHUNK)
    ps = 4 * h0 + tl.arange(0, 4 * CHUNK)
    # volatile: loaded each tile, where the compiler hoisted the five tiles' bias out of the loop into 32 registers each
    bias = tl.load(BIAS + ps, mask=ps < WG, other=0.0, volatile=True).to(tl.float32)  # WG: the gate's first column
    p = tl.dot(zn, w, input_precision=PRECISION) + bias[None, :]
    pa, pb = tl.split(tl.permute(tl.reshape(p, (BLOCK_R, 2, 2 * CHUNK)), (0, 2, 1)))
    ga, va = tl.split(tl.reshape(pa, (BLOCK_R, CHUNK, 2)))
    gb, vb = tl.split(tl.reshape(pb, (BLOCK_R, CHUNK, 2)))
    dst = cm[:, None] + hs[None, :] * nn
    smask = rmask[:, None] & (hs < H)[None, :]
    tl.store(AT + dst, _round(_sigmoid(ga, SIG) * va * m[:, None], BF16, EMULATE), mask=smask)
    tl.store(BT + dst, _round(_sigmoid(gb, SIG) * vb * m[:, None], BF16, EMULATE), mask=smask)


@triton.jit
def _gate(zn, wg, BIAS, WG, cs, cmask, PRECISION: tl.constexpr, SIG: tl.constexpr):
    # the output gate from the normalised z tile against the gate's weight tile (IN_AB's bias: its columns from WG)
    bias = tl.load(BIAS + WG + cs, mask=cmask, other=0.0, volatile=True).to(tl.float32)
    return _sigmoid(tl.dot(zn, wg, input_precision=PRECISION) + bias[None, :], SIG)


@triton.jit
def _in_pipe_kernel(
    Z, GAMMA, BETA, BIAS, M, AT, BT, G,  # as _fused._in_kernel: z [B NN, C], the mask [B NN], a, b [B, H, NN],
    # g [B NN, C]
    WD4, WD1, WG,  # descriptors over IN_AB's padded w_in, tiles [WIDTH, 4 CHUNK] and [WIDTH, WIDTH]; g's first column
    NN, C, H, eps, tiles_total,
    NUM_PROGRAMS: tl.constexpr, STAGES: tl.constexpr,
    BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, CHUNK: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
    SIG: tl.constexpr, GATE: tl.constexpr,  # the output gate here (else the last kernel forms it from z: FIN_ZGATE)
):
    # w_in whole, loaded once: loop invariants, which the compiler keeps in shared memory for the products
    w0 = WD4.load([0, 0])
    w1 = WD4.load([0, 4 * CHUNK])
    w2 = WD4.load([0, 8 * CHUNK])
    w3 = WD4.load([0, 12 * CHUNK])
    if GATE:
        wg = WD1.load([0, WG])
    cs = tl.arange(0, WIDTH)
    cmask = cs < C
    # tiles pid, pid + #programs, ...: the loop is software-pipelined, so z's tile (and the mask's) for a later step
    # is in flight (cp.async into shared memory) while this step normalises, multiplies and stores
    for t in tl.range(tl.program_id(0), tiles_total, NUM_PROGRAMS, num_stages=STAGES):
        rows, cm, rmask, nn = _tile_pairs(t, NN, H, BLOCK_R, OFFS_64)
        zmask = rmask[:, None] & cmask[None, :]
        x = tl.load(Z + rows[:, None] * C + cs[None, :], mask=zmask, other=0.0).to(tl.float32)
        zn = _layernorm_tile(x, zmask, GAMMA, BETA, cs, cmask, C, eps, CENTER=not BF16)
        zn = _round(zn, BF16, EMULATE)
        m = tl.load(M + rows, mask=rmask, other=0.0).to(tl.float32)
        _ab_chunk(zn, w0, BIAS, WG, AT, BT, m, cm, rmask, nn, H, 0, BLOCK_R, CHUNK, BF16, EMULATE, PRECISION, SIG)
        _ab_chunk(zn, w1, BIAS, WG, AT, BT, m, cm, rmask, nn, H, CHUNK, BLOCK_R, CHUNK, BF16, EMULATE, PRECISION, SIG)
        _ab_chunk(zn, w2, BIAS, WG, AT, BT, m, cm, rmask, nn, H, 2 * CHUNK, BLOCK_R, CHUNK, BF16, EMULATE, PRECISION,
                  SIG)
        _ab_chunk(zn, w3, BIAS, WG, AT, BT, m, cm, rmask, nn, H, 3 * CHUNK, BLOCK_R, CHUNK, BF16, EMULATE, PRECISION,
                  SIG)
        if GATE:
            g = _gate(zn, wg, BIAS, WG, cs, cmask, PRECISION, SIG)
            tl.store(G + rows[:, None] * C + cs[None, :], _round(g, BF16, EMULATE),
                     mask=rmask[:, None] & cmask[None, :])


@triton.jit
def _out_pipe_kernel(
    O, GAMMA, BETA, WD, BIAS, G, Y,  # as _fused._out_kernel: o [B, H, NN] channel-major; WD over w_out [H, C], one
    # [WIDTH, CW] tile; g, y [B NN, C]
    Z, GAMMA_IN, BETA_IN, BI, WGD, WG,  # with ZGATE: z [B NN, C], the first LayerNorm, IN_AB's padded bias, a
    # descriptor over its padded w_in, one [CW, CW] tile, and the gate's first column there
    NN, C, H, eps, tiles_total,
    NUM_PROGRAMS: tl.constexpr, STAGES: tl.constexpr, BLOCK_R: tl.constexpr, WIDTH: tl.constexpr, CW: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
    ZGATE: tl.constexpr, SIG: tl.constexpr,  # the gate formed here from z (FIN_ZGATE), not read as g; its sigmoid
):
    # the last kernel in the same shape: w_out whole, loaded once and kept in shared memory; o's and g's tiles for a
    # later step in flight while this step normalises, multiplies and stores. The grid kernel reads w_out from L2 for
    # every 64 pairs, as many bytes as it reads of o and g together
    w = WD.load([0, 0])
    if ZGATE:  # g's round trip (C bytes out and in a pair at bf16) traded for z read again (C in)
        wg = WGD.load([0, WG])
    hs = tl.arange(0, WIDTH)
    hmask = hs < H
    cs = tl.arange(0, CW)
    cmask = cs < C
    for t in tl.range(tl.program_id(0), tiles_total, NUM_PROGRAMS, num_stages=STAGES):
        rows, cm, rmask, nn = _tile_pairs(t, NN, H, BLOCK_R, OFFS_64)
        omask = rmask[:, None] & hmask[None, :]
        x = tl.load(O + cm[:, None] + hs[None, :] * nn, mask=omask, other=0.0).to(tl.float32)  # runs along pairs
        ymask = rmask[:, None] & cmask[None, :]
        if ZGATE:
            xz = tl.load(Z + rows[:, None] * C + cs[None, :], mask=ymask, other=0.0).to(tl.float32)
            zn = _round(_layernorm_tile(xz, ymask, GAMMA_IN, BETA_IN, cs, cmask, C, eps, CENTER=not BF16), BF16,
                        EMULATE)
            g = _gate(zn, wg, BI, WG, cs, cmask, PRECISION, SIG)
        else:
            g = tl.load(G + rows[:, None] * C + cs[None, :], mask=ymask, other=0.0).to(tl.float32)
        on = _round(_layernorm_tile(x, omask, GAMMA, BETA, hs, hmask, H, eps, CENTER=not BF16), BF16, EMULATE)
        bias = tl.load(BIAS + cs, mask=cmask, other=0.0, volatile=True).to(tl.float32)  # volatile: as _ab_chunk's
        y = tl.dot(on, w, input_precision=PRECISION) + bias[None, :]
        tl.store(Y + rows[:, None] * C + cs[None, :], _round(y * g, BF16, EMULATE), mask=ymask)
# </kernel>


def first(zc, m, gamma, beta, bias, at, bt, g, wd4, wd1, wg: int, NN: int, C: int, H: int, eps: float, c: dict,
          width: int, flags: dict, sig: str) -> None:
    """The first kernel's work by this road: a, b [B, H, NN] and g [B NN, C] from z [B NN, C]; ``wd4``, ``wd1``,
    ``wg``: IN_AB's weights (``_fused_weights.first_weights``), whose gate is taken here as one tile of the padded width."""
    r, B = c["IN_R"], at.shape[0]
    gd = TensorDescriptor(wd1.base, wd1.shape, wd1.strides, [width, width])
    tiles = B * triton.cdiv(NN, r)
    n = programs(tiles, zc.device)
    _in_pipe_kernel[(n,)](zc, gamma, beta, bias, m, at, bt, g, wd4, gd, wg, NN, C, H, eps, tiles, NUM_PROGRAMS=n,
                          STAGES=c["IN_PIPE"], BLOCK_R=r, WIDTH=width, CHUNK=c["IN_H"], SIG=sig, GATE=g is not None,
                          num_warps=c["IN_WARPS"], num_stages=1, **flags)


def last(o, gamma, beta, bias, g, y, wdo, zgate, NN: int, C: int, H: int, eps: float, c: dict, hw: int, cw: int,
         flags: dict, sig: str) -> None:
    """The last kernel's work by this road: y [B NN, C] from o [B, H, NN] and g; ``wdo``: FIN_TMA's descriptor over
    w_out (``_fused_weights.out_weights``), whose tensor is taken here as one tile of the padded widths. With
    FIN_ZGATE, ``zgate`` is (z, gamma_in, beta_in, IN_AB's padded bias, its descriptor over w_in, g's column there)
    and g is None."""
    r, B = c["FIN_R"], o.shape[0]
    wd = TensorDescriptor(wdo.base, wdo.shape, wdo.strides, [hw, cw])
    z, gi, bi, bb, wd1, wg = zgate or (None,) * 6
    wgd = TensorDescriptor(wd1.base, wd1.shape, wd1.strides, [cw, cw]) if zgate else None
    tiles = B * triton.cdiv(NN, r)
    n = programs(tiles, o.device)
    _out_pipe_kernel[(n,)](o, gamma, beta, wd, bias, g, y, z, gi, bi, bb, wgd, wg or 0, NN, C, H, eps, tiles,
                           NUM_PROGRAMS=n, STAGES=c["FIN_PIPE"], BLOCK_R=r, WIDTH=hw, CW=cw, ZGATE=zgate is not None,
                           SIG=sig, num_warps=c["FIN_WARPS"], num_stages=1, **flags)
