"""neighbor_agg in Triton: y_i = sum_{j in N(i)} w_ij x_j over a CSR graph, one launch, every output
a fixed-order sum (bitwise identical run to run). Row blocks take the ordinary rows; rows with more
than SPLIT edges (hubs) are cut into chunks of SPLIT edges so one hub cannot hold up the whole launch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import TileTable, common, register_kernel

from .spec import SPEC
from .triton_plan import PLANS as _PLANS, build as _plan  # noqa: F401 - _PLANS: the launch-path tests clear it


# <kernel>
@triton.jit
def _flag_raise(Flag, INTERPRET: tl.constexpr):
    # Publish this program's partial sum: a fence and a release store (a plain store, not an atomic).
    # Every thread stores the same 1 after the barrier that follows the partial-sum stores.
    if INTERPRET:  # the interpreter runs programs one after another: ordering holds trivially
        tl.store(Flag, 1)
    else:
        tl.inline_asm_elementwise("fence.acq_rel.gpu; st.release.gpu.global.u32 [$1], 1; mov.u32 $0, 0;",
                                  "=r,l", [Flag], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _flag_read(Flags, INTERPRET: tl.constexpr):
    # Acquire loads of a block of flags: what a chunk stored before raising its flag is visible after.
    if INTERPRET:
        return tl.load(Flags)
    else:
        return tl.inline_asm_elementwise("ld.acquire.gpu.global.u32 $0, [$1];", "=r,l", [Flags],
                                         dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _guard(j, mask, n_src, Err):
    # The bounds guard (GUARD): a column outside [0, n_src) is not read; it raises the error flag,
    # which the launcher reads after the launch (a synchronisation) and turns into an error.
    bad = mask & ((j < 0) | (j >= n_src))
    tl.store(Err + tl.zeros_like(j), 1, mask=bad)
    return mask & ~bad


@triton.jit
def _hub_chunk(Rowptr, Col, W, X, Y, HubRow, HubFirst, ChunkHub, Part, Flag, Err, F, n_src, stride_x,
               stride_y, chunk, n_chunks, feats, fmask, SPLIT, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr,
               BLOCK_P: tl.constexpr, BLOCK_W: tl.constexpr, INTERPRET: tl.constexpr, GUARD: tl.constexpr,
               LOWER_FLAGS: tl.constexpr):
    # Arguments as in _neighbor_agg_kernel below, plus: chunk, the hub chunk this program sums;
    # feats and fmask, its feature columns and which of them exist.
    # One chunk of a hub: up to SPLIT consecutive edges, BLOCK_E gathered rows of x per step.
    hub = tl.load(ChunkHub + chunk)
    row = tl.load(HubRow + hub)
    first = tl.load(HubFirst + hub)
    parts = tl.load(HubFirst + hub + 1) - first
    lo = tl.load(Rowptr + row) + (chunk - first) * SPLIT
    hi = tl.minimum(lo + SPLIT, tl.load(Rowptr + row + 1))
    acc = tl.zeros((BLOCK_F,), dtype=tl.float32)
    for e0 in range(lo, hi, BLOCK_E):
        edges = e0 + tl.arange(0, BLOCK_E)
        mask = edges < hi
        j = tl.load(Col + edges, mask=mask, other=0)
        w = tl.load(W + edges, mask=mask, other=0.0)
        if GUARD:
            mask = _guard(j, mask, n_src, Err)
        # bf16 features (the model blocks' bf16 rows) are summed in FP32 and rounded once at the store;
        # for FP32 features the conversion is a no-op and the kernel is unchanged
        xj = tl.load(X + j.to(tl.int64)[:, None] * stride_x + feats[None, :],
                     mask=mask[:, None] & fmask[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(w[:, None] * xj, axis=0)
    # 64-bit: chunks x F partial sums can pass 2^31 at sizes that fit (a few scalar operations a chunk)
    tl.store(Part + chunk.to(tl.int64) * F + feats, acc, mask=fmask)
    # Flags, one per (feature block, chunk), not atomics: every chunk stores its partial sum and raises
    # its flag; the hub's last chunk waits for all of them and adds the partials in chunk order, so the
    # result does not depend on which program finished first. The last chunk only waits for programs
    # with smaller ids, dispatched before it: the same in-order dispatch single-pass scans rely on.
    flags = Flag + tl.program_id(1).to(tl.int64) * n_chunks
    tl.debug_barrier()  # every thread's partial-sum stores come before the flag
    _flag_raise(flags + chunk + tl.zeros((1,), dtype=tl.int32), INTERPRET)
    if chunk == first + parts - 1:
        last = first + parts - 1
        for f0 in range(first, first + parts, BLOCK_W):  # wait for every chunk of the hub
            f = tl.minimum(f0 + tl.arange(0, BLOCK_W), last)  # in bounds: spare lanes reread the last
            while tl.min(_flag_read(flags + f, INTERPRET), axis=0) == 0:
                pass
        tl.debug_barrier()  # one thread's acquire orders the other threads' reads after it
        total = tl.zeros((BLOCK_F,), dtype=tl.float32)
        for p0 in range(first, first + parts, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            block = tl.load(Part + p.to(tl.int64)[:, None] * F + feats[None, :], mask=(p <= last)[:, None] & fmask[None, :],
                            other=0.0, cache_modifier=".cg")
            total += tl.sum(block, axis=0)  # a fixed reduction tree: the same order every run
        tl.store(Y + row.to(tl.int64) * stride_y + feats, total, mask=fmask)
        if LOWER_FLAGS:  # False only in a test's mutant, which the GPU tests must catch
            for f0 in range(first, first + parts, BLOCK_W):  # lowered for the next call (stream-ordered)
                f = f0 + tl.arange(0, BLOCK_W)
                tl.store(flags + f, tl.zeros((BLOCK_W,), dtype=tl.int32), mask=f <= last)


@triton.jit
def _row_block(Rowptr, Col, W, X, Y, Err, Order, n, n_src, stride_x, stride_y, block, feats, fmask, SPLIT,
               BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr, GUARD: tl.constexpr,
               ORDER: tl.constexpr):
    # Arguments as in _neighbor_agg_kernel below, plus: block, the row block this program sums;
    # feats and fmask, its feature columns and which of them exist.
    # BLOCK_R rows side by side: step d takes edges d .. d + BLOCK_D of every row at once. With ORDER
    # the block's rows come from the plan's degree order, so rows of like degree share the loop (a
    # block runs as many steps as its longest row; the others' lanes are masked meanwhile).
    slot = block * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = slot < n
    if ORDER:
        row = tl.load(Order + slot, mask=rmask, other=0)
    else:
        row = slot
    start = tl.load(Rowptr + row, mask=rmask, other=0)
    deg = tl.load(Rowptr + row + 1, mask=rmask, other=0) - start
    keep = rmask
    if SPLIT > 0:
        keep = rmask & (deg <= SPLIT)  # hubs are written by their chunks
        deg = tl.where(keep, deg, 0)
    acc = tl.zeros((BLOCK_R, BLOCK_F), dtype=tl.float32)
    for d0 in range(0, tl.max(deg, axis=0), BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        mask = d[None, :] < deg[:, None]
        edges = start[:, None] + d[None, :]
        j = tl.load(Col + edges, mask=mask, other=0)
        w = tl.load(W + edges, mask=mask, other=0.0)
        if GUARD:
            mask = _guard(j, mask, n_src, Err)
        xj = tl.load(X + j.to(tl.int64)[:, :, None] * stride_x + feats[None, None, :],
                     mask=mask[:, :, None] & fmask[None, None, :], other=0.0).to(tl.float32)  # as above
        acc += tl.sum(w[:, :, None] * xj, axis=1)
    tl.store(Y + row.to(tl.int64)[:, None] * stride_y + feats[None, :], acc, mask=keep[:, None] & fmask[None, :])


@triton.jit
def _neighbor_agg_kernel(
    Rowptr, Col, W,  # the CSR graph: rowptr [n + 1], col [E], w [E]
    X, Y,  # pointers to x [n_src, F] and the output y [n, F]
    HubRow, HubFirst, ChunkHub,  # the split plan: each hub's row, its first chunk, each chunk's hub
    Part, Flag,  # partial sums [chunks, F]; a flag per (feature block, chunk), zero between calls
    Err,  # the bounds guard's flag (read only with GUARD)
    Order,  # the rows by degree, largest first: a permutation of 0 .. n - 1 (read only with ORDER)
    n, F, n_src,  # rows of y, features, rows of x
    stride_x, stride_y,  # row strides of x and y (features are contiguous)
    n_chunks,  # programs below this take one hub chunk each (the heavy work first); the rest row blocks
    SPLIT,  # rows with more edges than this are hubs, summed in chunks of SPLIT edges (0: no hubs)
    BLOCK_R: tl.constexpr,  # rows per row block
    BLOCK_D: tl.constexpr,  # edges per row per step in a row block
    BLOCK_E: tl.constexpr,  # edges per step in a hub chunk
    BLOCK_F: tl.constexpr,  # features per program (a grid axis when F is wider)
    BLOCK_P: tl.constexpr,  # partial sums a hub's last chunk adds per step
    BLOCK_W: tl.constexpr,  # flags it reads per step while it waits
    INTERPRET: tl.constexpr,  # under the CPU interpreter: plain loads and stores for the flags
    GUARD: tl.constexpr = False,  # check every column against n_src (off: the instructions measured)
    LOWER_FLAGS: tl.constexpr = True,  # a test-only switch: False builds the stale-flag mutant
    ORDER: tl.constexpr = False,  # row blocks take their rows in the plan's degree order
):
    pid = tl.program_id(0)
    feats = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    fmask = feats < F
    if pid < n_chunks:
        _hub_chunk(Rowptr, Col, W, X, Y, HubRow, HubFirst, ChunkHub, Part, Flag, Err, F, n_src, stride_x,
                   stride_y, pid, n_chunks, feats, fmask, SPLIT, BLOCK_E, BLOCK_F, BLOCK_P, BLOCK_W, INTERPRET,
                   GUARD, LOWER_FLAGS)
    else:
        _row_block(Rowptr, Col, W, X, Y, Err, Order, n, n_src, stride_x, stride_y, pid - n_chunks, feats, fmask,
                   SPLIT, BLOCK_R, BLOCK_D, BLOCK_F, GUARD, ORDER)
# </kernel>


def _tile(rows, edges, hub_edges, split, warps, order=0, max_f=64):
    """BLOCK_R rows of BLOCK_D edges a program; hubs cut into chunks of BLOCK_E edges past SPLIT edges
    (0: never split); ORDER: rows in degree order; MAX_BLOCK_F caps the features a program takes."""
    return dict(BLOCK_R=rows, BLOCK_D=edges, BLOCK_E=hub_edges, SPLIT=split, ORDER=order, MAX_BLOCK_F=max_f,
                num_warps=warps)


# Names: rows x edges a program (r, d), the split (none, or hubs past SPLIT edges), warps; '_ordered'
# for rows in degree order. In the order a tile sweep tries them, the plain one first: one row a
# program walking its edges, no splitting (a hub keeps one program busy while the rest of the GPU
# idles). Registers bound the row-block tile: BLOCK_R x BLOCK_D x 64 features over 4 warps is 128
# values a thread (220 registers compiled for sm_90), so the 16 x 16 tiles get 8 warps.
_FP32 = {
    "r1_d32_nosplit_w4": _tile(1, 32, 32, 0, 4),
    "r16_d16_nosplit_w8": _tile(16, 16, 64, 0, 8),
    "r8_d16_split256_w4": _tile(8, 16, 64, 256, 4),
    "r16_d16_split256_w8": _tile(16, 16, 64, 256, 8),
    "r16_d16_split512_w8": _tile(16, 16, 128, 512, 8),
    "r16_d16_split2048_w8": _tile(16, 16, 128, 2048, 8),
    "r32_d8_split512_w8": _tile(32, 8, 128, 512, 8),
    "r8_d8_split512_w4": _tile(8, 8, 128, 512, 4),
    "r4_d32_split128_w4": _tile(4, 32, 64, 128, 4),
    # the base with its row blocks in degree order (kernels/NOTES.md: the skewed graph's miss)
    "r8_d16_split256_w4_ordered": _tile(8, 16, 64, 256, 4, order=1),
}
# bf16 features: the FP32 tiles cap a program at 64 features (256 bytes of a row), so a bf16 row of 128
# features took two programs of 128-byte gathers, each reading the row's columns and weights again: at
# the message-passing block's graph (n = 16384, F = 128) 54 us, against 16 us with one program for the
# whole row, the same 256 bytes (run 20261204T205225Z's diagnostic, kernel time; FP32 there: 20 us).
# The bf16 entries keep every other FP32 choice (SPLIT and ORDER too, so ``structure_free`` holds for
# both); at F <= 64 they are the FP32 tiles.
_BF16 = {name: dict(c, MAX_BLOCK_F=128) for name, c in _FP32.items()}


def _ordered(s) -> bool:
    """A million rows or more, of at most 64 features (one feature block at the FP32 tiles)."""
    return s["n"] >= 1 << 20 and s["F"] <= 64


# The recorded tile sweep (data/h200/tiles.csv; its times in kernels/NOTES.md): 8 rows x 16 edges, 4
# warps, hubs cut at 256 edges was best on both graphs of a million rows and close to the best on both
# of 8192 rows, where the best config differed by graph. At a million rows the same tiles with the
# rows in degree order took 0.90x the span on the skewed graph (run 20261204T173226Z); a uniform
# graph's order is the identity. Elsewhere the rows keep their order, so a graph without hubs stays
# structure-free.
TILES = {dtype: TileTable("neighbor_agg", table, base="r8_d16_split256_w4",
                          rule=(("r8_d16_split256_w4_ordered", _ordered),))
         for dtype, table in (("fp32", _FP32), ("bf16", _BF16))}
FIRST = TILES["fp32"]["r1_d32_nosplit_w4"]


def _tiles(dtype) -> TileTable:
    return TILES["bf16"] if dtype == torch.bfloat16 else TILES["fp32"]

# The combining step, not a tile parameter of the lesson: a hub's last chunk waits for its flags
# BLOCK_W at a time, then adds BLOCK_P partial sums a step (BLOCK_P x BLOCK_F values in flight). A
# first version waited and added 16 chunks a step: the 4096-chunk hub of the skewed large graph then
# took ~10% longer than the counter it replaced (256 steps, each a flag round trip and a barrier).
BLOCK_P, BLOCK_W = 32, 1024

# The device-side bounds guard: off by default (the kernels trust a built graph, and the guard's error
# check reads a flag back after every launch, a synchronisation); on for a caller who cannot rule out a
# graph modified behind PyTorch's version counters. Per call: neighbor_agg(..., guard=True).
BOUNDS_GUARD = False
_ERR: dict = {}  # the guard's flag, one int32 per device


def _launch(rowptr, col, w, x, out, max_degree, config, guard=None, lower_flags=True):
    n, F, n_src = rowptr.numel() - 1, x.shape[1], x.shape[0]
    if x.stride(1) != 1:
        x = x.contiguous()  # costs one extra read and write of x
    cfg = _tiles(x.dtype).choose(dict(n=n, F=F), config)
    block_f = min(common.pow2(F), cfg.pop("MAX_BLOCK_F"))
    split = cfg.pop("SPLIT")
    order = bool(cfg.pop("ORDER", 0))
    fblocks = common.cdiv(F, block_f)
    plan = _plan(rowptr, max_degree, split, F, fblocks, order)
    consts, launch = common.split(cfg)
    guard = BOUNDS_GUARD if guard is None else bool(guard)
    err = _ERR.get(x.device)
    if err is None:
        err = _ERR[x.device] = torch.zeros(1, dtype=torch.int32, device=x.device)
    grid = (plan["n_chunks"] + common.cdiv(n, consts["BLOCK_R"]), fblocks)
    common.launch(_neighbor_agg_kernel, grid, rowptr, col, w, x, out, plan["hub_row"], plan["hub_first"], plan["chunk_hub"],
                               plan["part"], plan["flag"], err, plan["order"], n, F, n_src, x.stride(0), out.stride(0),
                               plan["n_chunks"], plan["split"], BLOCK_F=block_f, BLOCK_P=BLOCK_P, BLOCK_W=BLOCK_W,
                               INTERPRET=common.interpreting(), GUARD=guard, LOWER_FLAGS=lower_flags, ORDER=order,
                               **consts, **launch)
    if guard and bool(err.item()):  # the synchronisation the guard costs
        err.zero_()
        raise MageInputError("neighbor_agg", "col", f"holds an index outside [0, {n_src}) (caught by the bounds "
                             "guard: the graph was changed after CSRGraph.build validated it); nothing out of "
                             "bounds was read, and the output is incomplete")
    return out


def neighbor_agg(graph, x, out=None, guard=None, _lower_flags=True, **config):
    """y_i = sum_{j in N(i)} w_ij x_j. The first call on a graph with hubs builds its split plan.
    ``guard``: check every column index on the device (default BOUNDS_GUARD); ``_lower_flags`` is a
    test-only switch that builds a broken kernel the GPU tests must catch."""
    SPEC.validate(graph, x)  # the cheap facts, every call: a built, intact graph; x's dtype, rank, rows
    n, F = graph.n, x.shape[1]
    ops.check_out("neighbor_agg", out, (n, F), x.dtype, x.device)
    common.on_device("neighbor_agg", {"rowptr": graph.rowptr, "col": graph.col, "w": graph.w, "x": x})
    out = torch.empty((n, F), dtype=x.dtype, device=x.device) if out is None else out
    if n == 0 or F == 0:
        return out
    return _launch(graph.rowptr, graph.col, graph.w, x, out, graph.max_degree, config, guard, _lower_flags)


def plan_for(rowptr, max_degree, n: int, F: int, config=None, dtype=torch.float32) -> dict:
    """The split plan a launch over n rows of F features of ``dtype`` with ``config`` finds (built once,
    then found): for a prepare, and for whoever must keep the plan a recorded launch reads alive."""
    cfg = _tiles(dtype).choose(dict(n=n, F=F), config)
    block_f = min(common.pow2(F), cfg["MAX_BLOCK_F"])
    return _plan(rowptr, max_degree, cfg["SPLIT"], F, common.cdiv(F, block_f), bool(cfg.get("ORDER", 0)))


def structure_free(max_degree, n: int) -> bool:
    """True when a default launch over n rows, on a graph of this maximum degree, cannot depend on the
    graph's structure, whatever the feature count: no row is a hub (the config's SPLIT is 0 or at least
    ``max_degree``) and the rows keep their own order (ORDER off). Such a launch reads only rowptr, col
    and w, in place, so a recorded launch serves any graph of the same size written into the same
    buffers. (From a million rows of up to 64 features the rule orders the rows: never structure-free.)"""
    if max_degree is None:
        return False
    # every config a launch over n rows can choose: the rule reads F only as F <= 64 (``_ordered``), so
    # one width on each side of that threshold covers them all
    for F in (64, 65):
        cfg = TILES["fp32"].choose(dict(n=n, F=F))
        if cfg.get("ORDER", 0) or not (cfg["SPLIT"] == 0 or max_degree <= cfg["SPLIT"]):
            return False
    return True


def prepare(graph, x, **config):
    """Build the split plan once per input set (never timed), as cuSPARSE's column builds its matrix."""
    if graph.n and x.shape[1]:
        plan_for(graph.rowptr, graph.max_degree, graph.n, x.shape[1], config, x.dtype)
    return graph, x


# bf16 features: FP32 weights and sums, one rounding at the store, the bf16 tiles above
for _dtype in SPEC.dtypes:
    register_kernel("neighbor_agg", neighbor_agg, TILES[_dtype], precision=_dtype, prepare=prepare)
