"""A periodic box of atoms at a liquid's density, its neighbour list, and the sum of messages over each
atom's neighbours through this project's aggregation: what the molecular models (SchNet, MACE) share.

A message-passing layer sums, for every atom, one message per edge. That is a segment sum of message rows:
the neighbour aggregation with the messages as its sources, the edges grouped by receiving atom and
weights of one. The grouping is built once per graph, as a simulation keeps its neighbour list for
several steps.
"""
from __future__ import annotations

import torch
from torch import nn

from mage.errors import MageInputError

from .swap import _ops

# water's number density, about 0.1 atoms per cubic angstrom (33 molecules per nm^3, three atoms each)
DENSITY = 0.1


def box(atoms: int, seed: int = 0, device="cpu", density: float = DENSITY, model: str = "atoms"):
    """(z, pos, L): water-like atom types (O, H, H), positions on a jittered cubic lattice (no two atoms
    on top of each other) in a periodic cube of side L angstrom."""
    if atoms < 1:
        raise MageInputError(model, "atoms", f"must be at least 1, got {atoms}")
    gen = torch.Generator().manual_seed(seed)
    L = (atoms / density) ** (1 / 3)
    side = int(round(atoms ** (1 / 3) + 0.5))
    grid = torch.stack(torch.meshgrid(*[torch.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    pick = torch.randperm(len(grid), generator=gen)[:atoms]
    pos = (grid[pick] + 0.5 + 0.3 * (torch.rand(atoms, 3, generator=gen) - 0.5)) * (L / side)
    z = torch.tensor([8, 1, 1]).repeat(atoms // 3 + 1)[:atoms]
    return z.to(device), pos.to(device=device, dtype=torch.float32), L


def _minimum_image(d, L):
    return d - L * torch.round(d / L)


@torch.no_grad()
def radius_graph(pos, L: float, cutoff: float, model: str = "atoms"):
    """Edges (source, target) between atoms closer than ``cutoff`` under periodic boundaries, both
    directions, no self loops; by brute force in chunks (built once, so its cost is not measured)."""
    if cutoff * 2 >= L:
        raise MageInputError(model, "cutoff", f"{cutoff} must be under half the box side {L:.1f} (minimum image)")
    chunk = max(1, min(4096, (1 << 26) // max(len(pos), 1)))  # rows of distances held at once: about 1 GB
    parts = []
    for lo in range(0, len(pos), chunk):
        d = _minimum_image(pos[None, :, :] - pos[lo:lo + chunk, None, :], L).norm(dim=-1)
        tgt, src = torch.nonzero(d < cutoff, as_tuple=True)
        keep = src != tgt + lo
        parts.append(torch.stack([src[keep], tgt[keep] + lo]))
    return torch.cat(parts, 1)


class KernelSum(nn.Module):
    """A message-passing layer's sum over neighbours through the neighbour aggregation: messages [E, F]
    summed into their receivers. The receivers' grouping (the edges sorted by receiver, and where each
    receiver's run starts) is kept for the index tensor it was built from."""

    def __init__(self):
        super().__init__()
        self._key, self._csr = None, None
        _ops()  # the operators found now, not in the first (perhaps compiled) call: an import breaks a graph

    @staticmethod
    def _group(index, n: int):
        order = torch.argsort(index, stable=True)
        # counts by a scatter of fixed length n (bincount's length depends on the data, which the compiler
        # cannot trace without breaking the graph)
        counts = torch.zeros(n, dtype=torch.int64, device=index.device).scatter_add_(0, index, torch.ones_like(index))
        rowptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]).to(torch.int32)
        ones = torch.ones(index.numel(), dtype=torch.float32, device=index.device)
        return rowptr, order.to(torch.int32), ones

    def _grouping(self, index, n: int):
        if torch.compiler.is_compiling():
            # inside a compiled graph the grouping is traced, not cached: the cache's key (a pointer and a
            # version) would break the graph, and a model whose autograd runs in the graph (MACE's forces)
            # loses the gradient of whatever came before a break
            return self._group(index, n)
        key = (index.data_ptr(), index._version, index.numel(), n)
        if key != self._key:
            self._key, self._csr = key, self._group(index, n)
        return self._csr

    def forward(self, x, index, ptr=None, dim_size=None, dim=-2):
        if x.dim() != 2 or dim not in (0, -2):
            raise MageInputError("neighbor_agg", "messages", f"must be [edges, features] summed over dim 0, got "
                                 f"shape {tuple(x.shape)} and dim {dim}")
        n = int(dim_size) if dim_size is not None else int(index.max()) + 1
        rowptr, order, ones = self._grouping(index, n)
        # the kernel packages' operators and their autograd, found by discovery once (swap._ops)
        return _ops().triton_neighbor_agg(rowptr, order, ones, x.contiguous())
