"""The host side of the Triton neighbour aggregation: the split plan of one graph (which rows are hubs,
how many SPLIT-edge chunks each gets, the partial-sum and flag buffers the chunks share, and with ORDER
the rows in degree order). Built on the host once per graph and found again by its rowptr tensor, so a
timed call never reads the graph back."""
from __future__ import annotations

import torch

from kernels._triton import common

# Split plans per graph structure, found again by the identity (and version) of its rowptr tensor.
PLANS = common.TensorMemo(32)


_EMPTY: dict = {}  # per device: what a plan without hubs passes for its buffers (the kernel never reads them)


def _placeholders(dev) -> tuple:
    """Shared, so a graph without hubs costs no allocation: a served batch is a new graph each time."""
    if dev not in _EMPTY:
        _EMPTY[dev] = (torch.zeros(1, dtype=torch.int32, device=dev), torch.zeros(1, device=dev))
    return _EMPTY[dev]


def build(rowptr, max_degree, split, F, fblocks, order=0):
    """The hub plan for one graph: built on the host once (it reads rowptr back, a synchronisation),
    then reused by every call with the same rowptr. Holds the partial-sum and flag buffers, and with
    ``order`` the rows sorted by degree, largest first (stable: equal degrees keep their order)."""
    hit = PLANS.get((rowptr,), (split, F, fblocks, order))
    if hit is not None:
        return hit
    dev = rowptr.device
    hubs = rows = None
    if order or (split > 0 and (max_degree is None or max_degree > split)):
        rp = rowptr.to("cpu", torch.int64)
        deg = rp[1:] - rp[:-1]
        if order:
            # largest first, as the hub chunks go first: the longest blocks start early, not in the tail
            rows = torch.sort(deg, stable=True, descending=True).indices.to(torch.int32).to(dev)
    if split > 0 and (max_degree is None or max_degree > split):
        hubs = torch.nonzero(deg > split).flatten()
    if hubs is None or hubs.numel() == 0:
        one, part = _placeholders(dev)
        plan = dict(hub_row=one, hub_first=one, chunk_hub=one, part=part, flag=one, n_chunks=0, split=0)
    else:
        per_hub = (deg[hubs] + split - 1) // split
        first = torch.zeros(hubs.numel() + 1, dtype=torch.int64)
        first[1:] = torch.cumsum(per_hub, 0)
        n_chunks = int(first[-1])
        plan = dict(hub_row=hubs.to(torch.int32).to(dev), hub_first=first.to(torch.int32).to(dev),
                    chunk_hub=torch.repeat_interleave(torch.arange(hubs.numel()), per_hub).to(torch.int32).to(dev),
                    part=torch.empty((n_chunks, F), dtype=torch.float32, device=dev),
                    flag=torch.zeros(n_chunks * fblocks, dtype=torch.int32, device=dev),
                    n_chunks=n_chunks, split=split)
    plan["order"] = rows if rows is not None else plan["hub_row"]  # a placeholder when not ordered
    return PLANS.put((rowptr,), (split, F, fblocks, order), plan)
