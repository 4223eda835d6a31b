"""A weighted graph in CSR form that can only be held validated.

``CSRGraph.build`` checks the structure once (rowptr monotone from 0 to E, every column in range:
a read of device memory, so a synchronisation) and is the only way to make one: the plain constructor
refuses. The kernels trust a built graph's indices. A caller who changes a built graph's tensors in
place would void that proof, so the graph records each tensor's version counter and ``intact()``
(checked on every call, well under a microsecond) refuses a graph whose tensors were written through
PyTorch since. Writes that bypass PyTorch's counters (a raw pointer handed to another library) are not
seen: like a sparse library's matrix descriptor, a graph must not be modified behind its back.
"""
from __future__ import annotations

import torch

from mage.errors import MageInputError
from mage.ops import contiguous, same_device, tensor

_OP = "neighbor_agg"


class CSRGraph:
    __slots__ = ("rowptr", "col", "w", "n_src", "row", "max_degree", "_versions")

    def __init__(self, *args, **kwargs):
        raise MageInputError(_OP, "graph", "cannot be constructed directly: use CSRGraph.build(rowptr, col, "
                                          "w, n_src), which validates the structure the kernels rely on")

    def __setattr__(self, name, value):
        raise AttributeError(f"CSRGraph is read-only (rebuild it with CSRGraph.build to change {name})")

    @property
    def n(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def nnz(self) -> int:
        return self.col.numel()

    @property
    def device(self):
        return self.col.device

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.rowptr, self.col, self.w))

    def versions(self) -> tuple:
        """The version counters of the validated tensors now (each in-place write bumps one)."""
        return (self.rowptr._version, self.col._version, self.w._version)

    def intact(self) -> bool:
        """False when one of the validated tensors was modified in place since ``build``."""
        return self._versions == self.versions()

    def check_intact(self) -> None:
        if not self.intact():
            raise MageInputError(_OP, "graph", "was modified in place after CSRGraph.build validated it; "
                                               "build it again")

    def to(self, device) -> "CSRGraph":
        """The same graph on ``device`` (validated again there, as every graph is)."""
        return CSRGraph.build(self.rowptr.to(device), self.col.to(device), self.w.to(device), self.n_src)

    def __repr__(self):
        return f"CSRGraph(n={self.n}, n_src={self.n_src}, nnz={self.nnz}, device={self.device})"

    @classmethod
    def build(cls, rowptr, col, w, n_src=None, op=_OP) -> "CSRGraph":
        tensor(op, "rowptr", rowptr, (torch.int32,), 1)
        tensor(op, "col", col, (torch.int32,), 1)
        tensor(op, "w", w, (torch.float32,), 1)
        same_device(op, {"rowptr": rowptr, "col": col, "w": w})
        contiguous(op, {"rowptr": rowptr, "col": col, "w": w})
        if rowptr.numel() < 1:
            raise MageInputError(op, "rowptr", "must have n + 1 >= 1 entries")
        E = col.numel()
        if w.numel() != E:
            raise MageInputError(op, "w", f"has {w.numel()} entries but col has {E}")
        if E >= 2**31 - 1:
            raise MageInputError(op, "col", f"has {E} edges; int32 offsets hold fewer than 2**31 - 1")
        rp = rowptr.to("cpu", torch.int64)
        if rp[0].item() != 0:
            raise MageInputError(op, "rowptr", f"must start at 0, starts at {rp[0].item()}")
        if rp[-1].item() != E:
            raise MageInputError(op, "rowptr", f"must end at E = {E} (len(col)), ends at {rp[-1].item()}")
        deg = rp[1:] - rp[:-1]
        if (deg < 0).any():
            bad = int(torch.nonzero(deg < 0)[0])
            raise MageInputError(op, "rowptr", f"must be non-decreasing; rowptr[{bad + 1}] < rowptr[{bad}]")
        n = rowptr.numel() - 1
        n_src = n if n_src is None else int(n_src)
        if n_src < 0:
            raise MageInputError(op, "n_src", f"must be >= 0, got {n_src}")
        if E:
            lo, hi = int(col.min()), int(col.max())
            if lo < 0 or hi >= n_src:
                raise MageInputError(op, "col", f"holds indices in [{lo}, {hi}], outside [0, {n_src})")
        # the COO row of each edge, derived once: the eager PyTorch expression scatters by it
        row = torch.repeat_interleave(torch.arange(n, dtype=torch.int32, device=col.device),
                                      deg.to(col.device), output_size=E)
        g = object.__new__(cls)
        for name, value in (("rowptr", rowptr), ("col", col), ("w", w), ("n_src", n_src), ("row", row),
                            ("max_degree", int(deg.max()) if n else 0),
                            ("_versions", (rowptr._version, col._version, w._version))):
            object.__setattr__(g, name, value)
        return g


def random_graph(n: int, deg: int, dist: str, gen: torch.Generator, device) -> CSRGraph:
    """A directed graph with mean degree ``deg``: 'uniform' (every row deg edges) or 'skewed' (Pareto
    tail: a few hubs hold many edges, most rows few or none, the case that breaks one-thread-per-row)."""
    if dist == "uniform":
        degrees = torch.full((n,), deg, dtype=torch.int64)
    elif dist == "skewed":
        u = torch.rand(n, generator=gen, device=gen.device).cpu().double().clamp_min(1e-12)
        raw = u.pow(-1.0 / 1.2) - 1.0  # Pareto with shape 1.2: heavy tail, finite mean
        degrees = torch.floor(raw * (deg / raw.mean().clamp_min(1e-12))).to(torch.int64)
    else:
        raise MageInputError(_OP, "dist", f"must be 'uniform' or 'skewed', got {dist!r}")
    degrees = degrees.clamp(0, max(n, 1)) if n else degrees
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(degrees, 0)
    E = int(rowptr[-1])
    col = torch.randint(0, max(n, 1), (E,), generator=gen, device=gen.device).cpu()
    if E:
        # sort columns within each row: a stable sort by (row, col)
        row = torch.repeat_interleave(torch.arange(n), degrees)
        col = col[torch.argsort(row * max(n, 1) + col)]
    w = torch.rand(E, generator=gen, device=gen.device).cpu().float() * 2 - 1
    return CSRGraph.build(rowptr.to(torch.int32).to(device), col.to(torch.int32).to(device),
                          w.to(device), n)


def regraph(g: CSRGraph, gen: torch.Generator) -> CSRGraph:
    """Same degrees as ``g``, fresh random (sorted) columns and weights."""
    E = g.nnz
    col = torch.randint(0, max(g.n_src, 1), (E,), generator=gen, device=gen.device)
    if E:
        col = col[torch.argsort(g.row.long() * max(g.n_src, 1) + col)]
    w = torch.rand(E, generator=gen, device=gen.device) * 2 - 1
    dev = g.col.device
    return CSRGraph.build(g.rowptr, col.to(torch.int32).to(dev), w.float().to(dev), g.n_src)
