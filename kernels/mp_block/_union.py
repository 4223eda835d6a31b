"""How the message-passing layer is served: a request is one graph (its CSR structure and its node
features h), and a batch is the disjoint union of its requests' graphs, as graph-network servers batch
(node features concatenated; every neighbour index shifted by the nodes of the graphs before it, every
row pointer by their edges). The union is one graph of B n nodes, so every implementation of the layer
serves a batch unchanged.

This is ``Batching.join`` (``mage.ext.service.batching``), the block's batch facet. Two steps:

- ``GraphUnion(pool, pinned)``, once per pool of requests, on the host: each request's graph is checked
  (a built ``CSRGraph`` mapping its own nodes onto themselves, h [n, F], one n, F and dtype for all), then
  padded to the pool's largest edge count with zero-weight self-loops, at most one more edge a row where
  it can (edge padding, as compiled graph networks pad: a batch of B requests then always has B times
  one edge count, so torch.compile and CUDA graphs see one shape per batch size; a zero weight adds
  nothing to any sum);
- ``GraphUnion.batch(requests, slots, device, non_blocking)``, per batch: each request's rowptr, col, w
  and h copied into its slot of device buffers kept per slot count, then one pass each shifts the fresh
  slots' indices by their slot's offsets and derives the edges' rows. Slots past the requests keep the
  graphs an earlier batch left there (already shifted), the padding of a padded batch.

The union is valid by construction (each part was validated when built, and a part's columns stay
inside its own slot's nodes), so it is assembled without ``CSRGraph.build``'s validation, which reads
the structure back to the host, a synchronisation per batch. ``_trusted_graph`` does that assembly; it
belongs beside ``CSRGraph.build`` (kernels/neighbor_agg/graph.py) as a ``CSRGraph.union``.
"""
from __future__ import annotations

import torch

from kernels.neighbor_agg.graph import CSRGraph
from mage.errors import MageInputError

OP = "mp_block"


def _pad_edges(g: CSRGraph, edges: int) -> CSRGraph:
    """g with zero-weight self-loops added (row r gets ``extra // n`` of them, one more for the first
    ``extra % n`` rows), columns kept sorted within rows, to ``edges`` edges in all."""
    n, extra = g.n, edges - g.nnz
    if extra == 0:
        return g
    if n == 0:
        raise MageInputError(OP, "graph", "a graph with no nodes cannot hold padding edges")
    per_row = torch.full((n,), extra // n, dtype=torch.int64)
    per_row[:extra % n] += 1
    pad_row = torch.repeat_interleave(torch.arange(n), per_row)
    row = torch.cat([g.row.long(), pad_row])
    col = torch.cat([g.col.long(), pad_row])
    w = torch.cat([g.w, torch.zeros(extra, dtype=torch.float32)])
    order = torch.argsort(row * max(n, 1) + col, stable=True)
    deg = torch.bincount(row, minlength=n)
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(deg, 0)
    return CSRGraph.build(rowptr.int(), col[order].int(), w[order].contiguous(), n, op=OP)


def _trusted_graph(rowptr, col, w, row, n, max_degree) -> CSRGraph:
    """A CSRGraph of tensors known valid (see the module docstring), assembled without reading them."""
    g = object.__new__(CSRGraph)
    for name, value in (("rowptr", rowptr), ("col", col), ("w", w), ("n_src", n), ("row", row),
                        ("max_degree", max_degree), ("_versions", (rowptr._version, col._version, w._version))):
        object.__setattr__(g, name, value)
    return g


class GraphUnion:
    """``Batching.join`` of the message-passing layer (see the module docstring)."""

    def __init__(self):
        self._slots: dict = {}  # (slots, device, layout) -> the device buffers of that many requests

    def __call__(self, pool: list, pinned: bool) -> list:
        """The pool's requests ({0: graph, 1: h}, host memory) checked, padded to one edge count, pinned."""
        if not pool:
            raise MageInputError(OP, "graph", "a pool of requests must hold at least one request")
        for r in pool:
            check_request(r[0], r[1], pool[0][1])
            if r[0].n != pool[0][0].n:
                raise MageInputError(OP, "graph", f"every request of a pool must have one node count (the request "
                                     f"shape's n); got {r[0].n} and {pool[0][0].n}")
        edges = max(r[0].nnz for r in pool)
        out = []
        for r in pool:
            g, h = _pad_edges(r[0], edges), r[1]
            if pinned:
                g = CSRGraph.build(g.rowptr.pin_memory(), g.col.pin_memory(), g.w.pin_memory(), g.n, op=OP)
                h = h.pin_memory()
            out.append({0: g, 1: h})
        return out

    def _buffers(self, slots, device, n, E, F, dtype):
        key = (slots, str(device), n, E, F, dtype)
        if key not in self._slots:
            if any(k[1:] != key[1:] for k in self._slots):  # another layout: the old buffers go
                self._slots.clear()
            node = torch.arange(slots * n, device=device)
            edge = torch.arange(slots * E, device=device)
            rowptr = torch.empty(slots * n + 1, dtype=torch.int32, device=device)
            rowptr[-1] = slots * E
            self._slots[key] = dict(
                rowptr=rowptr, col=torch.empty(slots * E, dtype=torch.int32, device=device),
                w=torch.empty(slots * E, dtype=torch.float32, device=device),
                row=torch.empty(slots * E, dtype=torch.int32, device=device),
                h=torch.empty((slots * n, F), dtype=dtype, device=device),
                node_shift=(edge // max(E, 1) * n).int(),  # per edge: the nodes of the slots before its own
                edge_shift=(node // max(n, 1) * E).int(),  # per node: the edges of the slots before its own
                node=node.int(), max_degree=0, filled=False)
        return self._slots[key]

    def batch(self, requests: list, slots: int, device, non_blocking: bool = False) -> dict:
        """{0: the union graph, 1: its features} of ``requests`` in the first of ``slots`` slots."""
        k = len(requests)
        if not 1 <= k <= slots:
            raise MageInputError(OP, "graph", f"a batch of {k} requests does not fit {slots} slots")
        first_g, first_h = requests[0][0], requests[0][1]
        n, E, F = first_g.n, first_g.nnz, first_h.shape[1]
        b = self._buffers(slots, device, n, E, F, first_h.dtype)
        fill = requests if b["filled"] else [requests[j % k] for j in range(slots)]  # a new buffer: every slot
        for r in requests:  # one layout: a request from another pool would land in the wrong slots
            g = r[0]
            if g.n != n or g.nnz != E or r[1].shape != (n, F) or not g.intact() or g.n_src != n:
                raise MageInputError(OP, "graph", f"every request of a batch must be a graph prepared by its "
                                     f"pool ({n} nodes, {E} edges, h [{n}, {F}]); got a graph of {g.n} nodes, "
                                     f"{g.nnz} edges and h of shape {tuple(r[1].shape)}")
        for j, r in enumerate(fill):
            g, h = r[0], r[1]
            b["rowptr"][j * n:(j + 1) * n].copy_(g.rowptr[:-1], non_blocking=non_blocking)
            b["col"][j * E:(j + 1) * E].copy_(g.col, non_blocking=non_blocking)
            b["w"][j * E:(j + 1) * E].copy_(g.w, non_blocking=non_blocking)
            b["h"][j * n:(j + 1) * n].copy_(h, non_blocking=non_blocking)
            b["max_degree"] = max(b["max_degree"], g.max_degree)  # a bound for every graph a slot held
        m, e = len(fill) * n, len(fill) * E  # the fresh slots, a prefix: shift them to their own place
        b["col"][:e] += b["node_shift"][:e]
        b["rowptr"][:m] += b["edge_shift"][:m]
        deg = b["rowptr"][1:m + 1] - b["rowptr"][:m]
        b["row"][:e] = torch.repeat_interleave(b["node"][:m], deg, output_size=e)
        b["filled"] = True
        rowptr, col, w, row = (b[x] for x in ("rowptr", "col", "w", "row"))
        if "graph" not in b:  # one graph object per buffer (torch.compile sees one input, not one a batch)
            b["graph"] = _trusted_graph(rowptr, col, w, row, slots * n, b["max_degree"])
        for name, value in (("max_degree", b["max_degree"]),  # the proof renewed: the buffers were rewritten
                            ("_versions", (rowptr._version, col._version, w._version))):
            object.__setattr__(b["graph"], name, value)
        return {0: b["graph"], 1: b["h"]}


def check_request(graph, h, first_h=None) -> None:
    """One request: a built graph on its own nodes, features h [n, F] (F and dtype those of ``first_h``)."""
    if not isinstance(graph, CSRGraph):
        raise MageInputError(OP, "graph", "a request's graph must be a CSRGraph (CSRGraph.build validates it)")
    if not graph.intact():
        raise MageInputError(OP, "graph", "was modified in place after CSRGraph.build validated it; build it again")
    if graph.n_src != graph.n:
        raise MageInputError(OP, "graph", f"a request's neighbour indices must stay inside its own {graph.n} nodes "
                             f"(n_src = n), so that shifted by the nodes before it they stay inside its slot; "
                             f"this graph indexes {graph.n_src} source nodes")
    if not isinstance(h, torch.Tensor) or h.dim() != 2 or h.shape[0] != graph.n:
        raise MageInputError(OP, "h", f"a request's features must be [n, F] with n = {graph.n}, the nodes of its "
                             f"graph; got {tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__}")
    if first_h is not None and (h.shape[1] != first_h.shape[1] or h.dtype != first_h.dtype):
        raise MageInputError(OP, "h", f"every request of a batch must have F = {first_h.shape[1]} channels of "
                             f"{first_h.dtype}; got {h.shape[1]} of {h.dtype}")
