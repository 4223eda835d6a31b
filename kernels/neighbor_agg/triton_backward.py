"""neighbor_agg's backward in Triton. For y_i = sum_{e in row i} w_e x_{col_e}:
    dx_j = sum over the edges e with col_e = j of w_e dy_{row_e}   (dx = A^T dy, the transposed graph)
    dw_e = dy_{row_e} . x_{col_e}                                   (one dot product an edge)
dx runs the forward's own kernel on the transposed graph (hubs of the transpose split the same way),
so every dx_j is a sum in a fixed order: the transposed graph lists each column's edges in their
original order (a stable sort, built once per graph structure and kept). dw is one program per block of
edges, each dot product in a fixed order. Nothing is atomic: the gradients are the same bits every run.

Makes ``mage::triton_neighbor_agg`` differentiable (in x and in the edge weights w) and registers the
training path. ``prepare_backward`` builds the transposed graph ahead of a training loop.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError
from mage.registry import declare

from kernels._triton import common

from . import triton_kernel as fwd
from .triton_operator import _cheap_checks, _validated, neighbor_agg_op  # the operator made differentiable

OP = "neighbor_agg"


# <kernel>
@triton.jit
def _edge_dot_kernel(
    Row, Col, DY, X, DW,  # each edge's row and column [E], dy [n, F], x [n_src, F], the output dw [E]
    E, F, stride_dy, stride_x,
    BLOCK_E: tl.constexpr,  # edges per program
    BLOCK_F: tl.constexpr,  # features per step
):
    edges = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    emask = edges < E
    i = tl.load(Row + edges, mask=emask, other=0).to(tl.int64)
    j = tl.load(Col + edges, mask=emask, other=0).to(tl.int64)
    acc = tl.zeros((BLOCK_E, BLOCK_F), dtype=tl.float32)
    for f0 in range(0, F, BLOCK_F):  # features in order, then one fixed tree: the same bits every run
        feats = f0 + tl.arange(0, BLOCK_F)
        mask = emask[:, None] & (feats < F)[None, :]
        dy = tl.load(DY + i[:, None] * stride_dy + feats[None, :], mask=mask, other=0.0)  # rows sorted: cached
        xj = tl.load(X + j[:, None] * stride_x + feats[None, :], mask=mask, other=0.0)
        acc += dy * xj
    tl.store(DW + edges, tl.sum(acc, axis=1), mask=emask)


@triton.jit
def _permuted_rows_kernel(
    Row, Col, W, DY, DX,  # each edge's row and column [E], its weight [E], dy [n, F], the output dx [E, F]
    E, F, stride_dy, stride_dx,
    BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr,
):
    # dx when every source has exactly one edge (col a permutation): dx_col_e = w_e dy_row_e, each row of
    # dx written once by one program; nothing is summed, so nothing depends on an order
    edges = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    feats = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    emask = edges < E
    i = tl.load(Row + edges, mask=emask, other=0).to(tl.int64)
    j = tl.load(Col + edges, mask=emask, other=0).to(tl.int64)
    w = tl.load(W + edges, mask=emask, other=0.0)
    mask = emask[:, None] & (feats < F)[None, :]
    dy = tl.load(DY + i[:, None] * stride_dy + feats[None, :], mask=mask, other=0.0)
    tl.store(DX + j[:, None] * stride_dx + feats[None, :], (dy * w[:, None]).to(DX.dtype.element_ty), mask=mask)
# </kernel>


EDGE_CONFIG = dict(BLOCK_E=64, MAX_BLOCK_F=64, num_warps=4)
# The permuted rows' tile: 16 rows of up to 256 features (16 KB of FP32 a program, 32 values a thread)
PERMUTED_CONFIG = dict(BLOCK_E=16, MAX_BLOCK_F=256, num_warps=4)

# The transposed structure of each graph, found again by the identity (and version) of rowptr and col:
# trowptr [n_src + 1], tcol (the original row of each transposed edge), perm (its original edge index),
# row (each original edge's row, for dw), the transpose's largest degree. Weights are not kept: they
# change between training steps, so each backward gathers w[perm] (4 bytes an edge, read and written).
_TRANSPOSED = common.TensorMemo(32)


def transposed(rowptr, col, n_src: int) -> dict:
    """The transposed graph of a validated CSR structure, built once (a stable sort by column, so each
    source node's edges keep their original order) and reused while rowptr and col are unchanged."""
    hit = _TRANSPOSED.get((rowptr, col), n_src)
    if hit is not None:
        return hit
    n, E, dev = rowptr.numel() - 1, col.numel(), col.device
    deg = (rowptr[1:] - rowptr[:-1]).long()
    row = torch.repeat_interleave(torch.arange(n, dtype=torch.int32, device=dev), deg, output_size=E)
    perm = torch.sort(col.long(), stable=True).indices if E else torch.zeros(0, dtype=torch.long, device=dev)
    tdeg = torch.bincount(col.long(), minlength=n_src) if E else torch.zeros(n_src, dtype=torch.long, device=dev)
    trowptr = torch.zeros(n_src + 1, dtype=torch.int32, device=dev)
    trowptr[1:] = torch.cumsum(tdeg, 0).to(torch.int32)
    t = dict(trowptr=trowptr, tcol=row[perm].contiguous(), perm=perm.to(torch.int32), row=row,
             max_degree=int(tdeg.max()) if n_src else 0)
    return _TRANSPOSED.put((rowptr, col), n_src, t)


# dx is the forward kernel on the transposed graph with the rows in their own order: at the large size
# the forward's default orders them by degree, which took the backward 1298 -> 1338 us (uniform graph)
# and 765 -> 806 us (skewed) in run 20261204T174037Z, where it took the skewed forward 1412 -> 1254.
DX_CONFIG = {"ORDER": 0}


def prepare_backward(graph, x, **config):
    """The forward's prepare, plus the transposed graph and its split plan (built once, never timed)."""
    fwd.prepare(graph, x, **config)
    memo_buffers(graph, x.shape[1])
    return graph, x


def memo_buffers(graph, F: int) -> tuple:
    """What a forward and a backward over ``graph`` with F features read from this module's memos (the
    forward's split plan, the transposed graph, the dx launch's split plan), built where missing. The
    memos hold their tensors weakly and drop old entries, so a CUDA graph that recorded those launches
    keeps this tuple alive while it replays."""
    if not F:
        return ()
    t = transposed(graph.rowptr, graph.col, graph.n_src)
    plans = (fwd.plan_for(graph.rowptr, graph.max_degree, graph.n, F) if graph.n else None,
             fwd.plan_for(t["trowptr"], t["max_degree"], graph.n_src, F, DX_CONFIG) if graph.n_src else None)
    return (t,) + plans


def neighbor_agg_backward(rowptr, col, w, x, dy, need_x=True, need_w=True):
    """(dx, dw) of y = A x for the incoming gradient dy (either None when not needed)."""
    _validated(rowptr, col, w, x)  # the forward validated this set: a memo look-up
    n, F, n_src, E = rowptr.numel() - 1, x.shape[1], x.shape[0], col.numel()
    ops.tensor(OP, "dy", dy, (torch.float32,), 2)
    if tuple(dy.shape) != (n, F):
        raise MageInputError(OP, "dy", f"must have the output's shape {(n, F)}, got {tuple(dy.shape)}")
    ops.same_device(OP, {"x": x, "dy": dy})
    common.on_device(OP, {"x": x, "dy": dy})
    dy = dy if dy.stride(1) == 1 else dy.contiguous()  # a broadcast gradient (stride 0 rows) is read as is
    dx = dw = None
    if need_x:
        dx = torch.empty((n_src, F), dtype=x.dtype, device=x.device)
        if n_src and F:
            t = transposed(rowptr, col, n_src)
            if E == n_src and t["max_degree"] == 1:
                # each source in exactly one edge (a sum of messages into their receivers: MACE's, where
                # the transpose's rows of one edge took a row-block program a handful of rows; notes)
                _permuted(t["row"], col, w, dy, dx)
            elif E:
                # index_select takes the int32 perm as it is; w[perm] cast it to int64 first, a kernel and
                # 12 bytes an edge more (run 093803Z's profile: a copy kernel before the gather)
                fwd._launch(t["trowptr"], t["tcol"], w.index_select(0, t["perm"]), dy, dx, t["max_degree"], DX_CONFIG)
            else:
                dx.zero_()
        elif n_src:
            dx.zero_()
    if need_w:
        dw = torch.empty((E,), dtype=w.dtype, device=w.device)
        if E and F:
            t = transposed(rowptr, col, n_src)
            x = x if x.stride(1) == 1 else x.contiguous()
            consts, launch = common.split(dict(EDGE_CONFIG))
            block_f = min(common.pow2(F), consts.pop("MAX_BLOCK_F"))
            _edge_dot_kernel[(common.cdiv(E, consts["BLOCK_E"]),)](t["row"], col, dy, x, dw, E, F, dy.stride(0),
                                                                  x.stride(0), BLOCK_F=block_f, **consts, **launch)
        elif E:
            dw.zero_()
    return dx, dw


def _permuted(row, col, w, dy, dx):
    E, F = col.numel(), dy.shape[1]
    consts, launch = common.split(dict(PERMUTED_CONFIG))
    block_f = min(common.pow2(F), consts.pop("MAX_BLOCK_F"))
    grid = (common.cdiv(E, consts["BLOCK_E"]), common.cdiv(F, block_f))
    _permuted_rows_kernel[grid](row, col, w, dy, dx, E, F, dy.stride(0), dx.stride(0), BLOCK_F=block_f, **consts, **launch)


@torch.library.custom_op("mage::triton_neighbor_agg_backward", mutates_args=())
def neighbor_agg_backward_op(rowptr: torch.Tensor, col: torch.Tensor, w: torch.Tensor, x: torch.Tensor,
                             dy: torch.Tensor, need_x: bool, need_w: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) as an operator, so a compiled graph's backward can call it; a gradient not needed is
    not computed and comes back empty (an operator returns tensors, not None)."""
    dx, dw = neighbor_agg_backward(rowptr, col, w, x, dy, need_x, need_w)
    return (x.new_empty(0) if dx is None else dx), (w.new_empty(0) if dw is None else dw)


@neighbor_agg_backward_op.register_fake
def _(rowptr, col, w, x, dy, need_x, need_w):
    _cheap_checks(rowptr, col, w, x)
    ops.tensor(OP, "dy", dy, (torch.float32,), 2)
    return (torch.empty_like(x) if need_x else x.new_empty(0)), (torch.empty_like(w) if need_w else w.new_empty(0))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy):
    rowptr, col, w, x = ctx.saved_tensors
    need_w, need_x = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    if not (need_w or need_x):
        return None, None, None, None
    dx, dw = torch.ops.mage.triton_neighbor_agg_backward(rowptr, col, w, x, dy, need_x, need_w)
    return None, None, (dw if need_w else None), (dx if need_x else None)


torch.library.register_autograd("mage::triton_neighbor_agg", _backward, setup_context=_setup_context)


def _setup_context_2(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:5])
    ctx.need = inputs[5:]


def _backward_2(ctx, gdx, gdw):
    """The backward's own gradient, for a graph whose autograd runs inside it with create_graph (MACE's
    forces under torch.compile). dx = A^T dy is linear in (w, dy) and dw_e = dy_{row_e} . x_{col_e} in
    (dy, x), so each gradient is one of the two operators with another weight or feature tensor:
        g_dy = A_w gdx + A_gdw x,   g_x = A_gdw^T dy,   g_w,e = dy_{row_e} . gdx_{col_e}."""
    rowptr, col, w, x, dy = ctx.saved_tensors
    need_x, need_w = ctx.need
    gdx = gdx if need_x and gdx is not None and gdx.numel() else None
    gdw = gdw if need_w and gdw is not None and gdw.numel() else None
    agg, bwd = torch.ops.mage.triton_neighbor_agg, torch.ops.mage.triton_neighbor_agg_backward
    g_dy = g_x = g_w = None
    if ctx.needs_input_grad[4]:
        parts = ([agg(rowptr, col, w, gdx)] if gdx is not None else []) + \
                ([agg(rowptr, col, gdw, x)] if gdw is not None else [])
        g_dy = sum(parts[1:], parts[0]) if parts else torch.zeros_like(dy)
    if ctx.needs_input_grad[3]:
        g_x = bwd(rowptr, col, gdw, x, dy, True, False)[0] if gdw is not None else torch.zeros_like(x)
    if ctx.needs_input_grad[2]:
        g_w = bwd(rowptr, col, w, gdx, dy, False, True)[1] if gdx is not None else torch.zeros_like(w)
    return None, None, g_w, g_x, g_dy, None, None


torch.library.register_autograd("mage::triton_neighbor_agg_backward", _backward_2, setup_context=_setup_context_2)


@declare("train", OP, "triton")
def train(graph, x):
    """The Triton column's training path: differentiable in x and in the graph's weights graph.w."""
    return neighbor_agg_op(graph.rowptr, graph.col, graph.w, x)
