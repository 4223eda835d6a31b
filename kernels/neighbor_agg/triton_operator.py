"""neighbor_agg's Triton kernel as a PyTorch operator (``torch.ops.mage.triton_neighbor_agg``) on raw
CSR tensors, so torch.compile graphs can call it. Raw tensors carry no proof of a valid graph, so the
operator validates them on every call: the cheap facts always, the structure once per tensor set."""
from __future__ import annotations

import torch

from mage import ops
from mage.errors import MageInputError

from kernels._triton import common

from .graph import CSRGraph
from .triton_kernel import _launch

# Tensor sets the operator has validated (and the x rows they were checked against): a repeated
# call with the same, unmodified tensors pays the structure check once.
_VALIDATED = common.TensorMemo(64)


def _cheap_checks(rowptr, col, w, x) -> None:
    """Types, dtypes, ranks, one device, contiguity, sizes: no device memory read."""
    op = "neighbor_agg"
    ops.tensor(op, "x", x, (torch.float32,), 2)
    for name, t, dt in (("rowptr", rowptr, torch.int32), ("col", col, torch.int32), ("w", w, torch.float32)):
        ops.tensor(op, name, t, (dt,), 1)
    ops.same_device(op, {"rowptr": rowptr, "col": col, "w": w, "x": x})
    ops.contiguous(op, {"rowptr": rowptr, "col": col, "w": w})
    if rowptr.numel() < 1:
        raise MageInputError(op, "rowptr", "must have n + 1 >= 1 entries")
    if w.numel() != col.numel():
        raise MageInputError(op, "w", f"has {w.numel()} entries but col has {col.numel()}")


def _validated(rowptr, col, w, x) -> int:
    """Validate the operator's raw tensors; returns the graph's largest degree. The cheap facts are
    checked on every call; the structure (rowptr monotone from 0 to E, every column in
    [0, x.shape[0])) reads device memory, so CSRGraph.build checks it once per tensor set and version."""
    _cheap_checks(rowptr, col, w, x)
    common.on_device("neighbor_agg", {"rowptr": rowptr, "col": col, "w": w, "x": x})
    seen = _VALIDATED.get((rowptr, col, w), x.shape[0])
    if seen is not None:
        return seen
    return _VALIDATED.put((rowptr, col, w), x.shape[0], CSRGraph.build(rowptr, col, w, x.shape[0]).max_degree)


@torch.library.custom_op("mage::triton_neighbor_agg", mutates_args=())
def neighbor_agg_op(rowptr: torch.Tensor, col: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The kernel as a PyTorch operator on raw CSR tensors (x's rows are the source nodes), validated
    on every call as ``_validated`` describes."""
    max_degree = _validated(rowptr, col, w, x)
    out = torch.empty((rowptr.numel() - 1, x.shape[1]), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    return _launch(rowptr, col, w, x, out, max_degree, {})


@neighbor_agg_op.register_fake
def _(rowptr, col, w, x):
    _cheap_checks(rowptr, col, w, x)  # a call with any 'meta' input lands here
    return x.new_empty((rowptr.shape[0] - 1, x.shape[1]))
