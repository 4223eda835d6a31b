"""The steps road's first projection with the gates and the mask in its epilogue (the projections' road
'hopper_gated', ``_projections``): one persistent Hopper GEMM (TMA loads, warpgroup MMA; matmul's Hopper
road's tiles) that writes a and b channel-major and g, where the 'hopper' road writes p [pairs, 4H + C]
and a second launch (the gate kernel) reads p's first 4H columns back to make a and b.

What it saves, per pair: p's 4H columns written and read again (at FP32 and H = 128, 4 KB of the 6.6 KB a
pair moved between the two launches), and one launch per complex. The weight's columns are reordered once
(kept while the weights live, ``_fused_weights._cached``): a's gate and value columns interleaved, then
b's, then g's, so that a tile of BLOCK_N columns holds BLOCK_N / 2 channels' gates and values side by side
and the epilogue pairs them with a reshape, not a second load. A tile lies wholly in the gated columns
or wholly in g's: BLOCK_N divides 4H (``block_n``).

The channel-major stores: a's channel h of the pair in row r = i N + k lands at h N^2 + r where the
contraction wants k innermost (K_INNER), else at h N^2 + k N + i. Either way a channel's BLOCK_M rows
are runs of contiguous addresses (K_INNER) or of stride N, so the store is by pointers, not by TMA."""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._triton import common
from kernels._triton.tiles import grouped_tile
from mage.errors import MageInputError

from ._fused_weights import _cached, joined
from ._projections import hopper_tiles


# <kernel>
@triton.jit
def _store_ab(acc, AB, Mask, rows, on, N, live, BLOCK_N: tl.constexpr, K_INNER: tl.constexpr, OFFS_64: tl.constexpr):
    # columns 2j and 2j + 1 of the tile: channel j's gate and value
    gate, value = tl.split(tl.reshape(acc, (acc.shape[0], BLOCK_N // 2, 2)))
    m = tl.load(Mask + rows, mask=live, other=0.0).to(tl.float32)
    ab = tl.sigmoid(gate) * value * m[:, None]
    ch = on // 2 + tl.arange(0, BLOCK_N // 2)  # a's channels 0..H-1, then b's H..2H-1
    if OFFS_64:
        ch = ch.to(tl.int64)
    if K_INNER:
        at = rows
    else:
        at = (rows % N) * N + rows // N
    tl.store(AB + ch[None, :] * N * N + at[:, None], ab.to(AB.dtype.element_ty), mask=live[:, None])


@triton.jit
def _store_g(acc, G, rows, cols, stride_g, C_out, live):
    tl.store(G + rows[:, None] * stride_g + cols[None, :], acc.to(G.dtype.element_ty),
             mask=live[:, None] & (cols < C_out)[None, :])  # (negative cols only where live is all false)


@triton.jit
def _gated_in_kernel(
    a_desc, w_desc,  # descriptors: zn [R, C] and the reordered weight [4H + C, C] (K-major)
    Bias, AB, G, Mask,  # bias [4H + C] (reordered); a and b [2H, N, N]; g [R, C_out]; the mask [R]
    R, N, H, C_out, K, stride_g,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, PRECISION: tl.constexpr, K_INNER: tl.constexpr, OFFS_64: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(R, BLOCK_M)
    gated = 4 * H // BLOCK_N  # tiles of gate-value pairs; g's columns after them
    tiles_n = gated + tl.cdiv(C_out, BLOCK_N)
    for tile in tl.range(pid, tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN):
        tile_m, tile_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        om = tile_m * BLOCK_M
        on = tile_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([om, ks * BLOCK_K])  # past R, K or the weight's rows TMA reads zeros
            w = w_desc.load([on, ks * BLOCK_K]).T
            acc = tl.dot(a, w, acc, input_precision=PRECISION)
        cols = on + tl.arange(0, BLOCK_N)
        acc += tl.load(Bias + cols, mask=cols < 4 * H + C_out, other=0.0)[None, :].to(tl.float32)
        rows = om + tl.arange(0, BLOCK_M)
        if OFFS_64:
            rows = rows.to(tl.int64)
        live = rows < R
        gated_tile = tile_n < gated
        if FLATTEN:
            # Triton 3.6's loop fusion fails on a branch on a runtime value in the body: both stores, masked
            _store_ab(acc, AB, Mask, rows, on, N, live & gated_tile, BLOCK_N, K_INNER, OFFS_64)
            _store_g(acc, G, rows, cols - 4 * H, stride_g, C_out, live & (tile_n >= gated))
        elif gated_tile:
            _store_ab(acc, AB, Mask, rows, on, N, live, BLOCK_N, K_INNER, OFFS_64)
        else:
            _store_g(acc, G, rows, cols - 4 * H, stride_g, C_out, live)
# </kernel>


def block_n(H: int, want: int) -> int:
    """The tile's columns: ``want`` or the largest power of two under it that divides 4H (a tile holds
    gated columns or g's, never both); 0 where that is under 16 (a wgmma tile's narrowest), the caller
    then takes the 'hopper' road with the gate kernel."""
    bn = min(want, (4 * H) & -(4 * H))
    return bn if bn >= 16 else 0


def _reordered(w_in, b_in, H: int, linear: bool):
    """(w [4H + C, K] K-major, bias [4H + C]): p's columns in the fused road's joined order (a's gate and value
    interleaved, b's likewise, then g's)."""
    w, b = joined(w_in.t() if linear else w_in, b_in, H)
    return w.t().contiguous(), b.contiguous()


def project(zn, w_in, b_in, mask, N: int, H: int, consts: dict, sdt, bn: int, linear: bool = False,
            op: str = "trimul_block"):
    """(a and b [B, 2H, N, N] channel-major, g [B N^2, C_out]) from zn [B N^2, C] and the mask [B, N, N],
    in ``sdt``; one launch per complex. ``consts``: the block's (K_INNER, GATED_TILES); the GEMM's tiles are
    matmul's Hopper road's for these sizes or those GATED_TILES names, with ``bn`` columns (``block_n``). w_in
    is [K, 4H + C_out], or with ``linear`` [4H + C_out, K] (Linear's layout, the task's form); either way
    reordered once while it lives. ``op``: the operation an error names."""
    from kernels.matmul import triton_hopper as hop  # (the Hopper road's tables and helpers, on first use)
    if not hop.available(zn.device):
        raise MageInputError(op, "config", "the 'hopper_gated' GEMM road needs an sm_90 (Hopper) GPU")
    B, (R, K), C_out = mask.shape[0], zn.shape, w_in.shape[0 if linear else 1] - 4 * H
    w, bias = _cached(("gated-in", id(w_in), id(b_in), linear, w_in.dtype, w_in.device), (w_in, b_in),
                      lambda: _reordered(w_in, b_in, H, linear))
    precision = "fp32x3" if zn.dtype == torch.float32 else "bf16"
    t = hop.TILES[precision].choose(dict(M=N * N, K=K, N=4 * H + C_out),
                                    hopper_tiles(consts, "GATED_TILES", zn.dtype, op))
    bm, bk = t["BLOCK_M"], t["BLOCK_K"]
    if zn.dtype == torch.bfloat16 and common.interpreting():
        zn, w = zn.float(), w.float()  # the interpreter's bf16 dot (see triton_hopper.gemm): exact in FP32
    zn, w = hop.k_major(zn, R, K, transpose=False), hop.k_major(w, w.shape[0], K, transpose=False)
    w_desc = TensorDescriptor(w, [w.shape[0], K], [w.stride(0), 1], [bn, bk])
    ab = torch.empty((B, 2 * H, N, N), dtype=sdt, device=zn.device)
    g = torch.empty((R, C_out), dtype=sdt, device=zn.device)
    mask = mask.reshape(B, N * N).contiguous()
    offs_64 = max(2 * H * N * N, R * max(C_out, K)) >= common.INT32_LIMIT
    tiles = common.cdiv(N * N, bm) * (4 * H // bn + common.cdiv(C_out, bn))
    nsm = hop.programs(zn.device, tiles)
    for c in range(B):
        rows = slice(c * N * N, (c + 1) * N * N)
        a_desc = TensorDescriptor(zn[rows], [N * N, K], [zn.stride(0), 1], [bm, bk])
        _gated_in_kernel[(nsm,)](
            a_desc, w_desc, bias, ab[c], g[rows], mask[c], N * N, N, H, C_out, K, g.stride(0),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=t["GROUP_M"], NUM_SMS=nsm,
            PRECISION=hop.PRECISION[precision], K_INNER=bool(consts["K_INNER"]), OFFS_64=offs_64,
            FLATTEN=bool(t["FLATTEN"]), num_warps=t["num_warps"], num_stages=t["num_stages"])
    return ab[:, :H], ab[:, H:], g
