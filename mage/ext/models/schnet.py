"""SchNet (PyTorch Geometric's model) on a periodic box of atoms at a liquid's density, with the sum
over each atom's neighbours' messages swapped for this project's neighbour aggregation.

SchNet's continuous-filter convolution sums, for every atom, one message per edge (the neighbour's
features times a filter of the distance): PyTorch Geometric's sum aggregation, which the swap replaces
with ``atoms.KernelSum``.
"""
from __future__ import annotations

import torch
from torch import nn

from mage.errors import MageInputError

from . import atoms as A
from .atoms import DENSITY, KernelSum, _minimum_image  # noqa: F401 - the names SchNet's users and tests know

SMALL = dict(hidden_channels=32, num_filters=32, num_interactions=2, num_gaussians=16, cutoff=4.0)
PUBLISHED = dict(hidden_channels=128, num_filters=128, num_interactions=6, num_gaussians=50, cutoff=5.0)


def box(atoms: int, seed: int = 0, device="cpu", density: float = DENSITY):
    return A.box(atoms, seed, device, density, model="schnet")


def radius_graph(pos, L: float, cutoff: float):
    return A.radius_graph(pos, L, cutoff, model="schnet")


class FixedGraph(nn.Module):
    """SchNet's interaction graph for a box whose edges were found once: the distances are taken from
    the positions on every call (so forces, the gradient with respect to them, flow through)."""

    def __init__(self, edge_index, L: float):
        super().__init__()
        self.register_buffer("edge_index", edge_index)
        self.L = L

    def forward(self, pos, batch):
        src, tgt = self.edge_index
        return self.edge_index, _minimum_image(pos[src] - pos[tgt], self.L).norm(dim=-1)


def build(config: dict, edge_index, L: float, device="cpu", seed: int = 0):
    try:
        from torch_geometric.nn.models import SchNet
    except ImportError as e:
        raise MageInputError("schnet", "torch_geometric", f"is needed to build the model ({e})") from None
    torch.manual_seed(seed)
    return SchNet(**config, interaction_graph=FixedGraph(edge_index, L)).to(device).eval()


def swap(model: nn.Module) -> int:
    """Give every message-passing layer that sums its messages our aggregation; returns how many."""
    from torch_geometric.nn.aggr import SumAggregation
    from torch_geometric.nn.conv import MessagePassing
    n = 0
    for m in model.modules():
        if isinstance(m, MessagePassing) and isinstance(m.aggr_module, SumAggregation):
            m.aggr_module = KernelSum()
            n += 1
    return n


def energy_and_forces(model, z, pos):
    """The model's energy of the box and the forces on its atoms (minus the gradient of the energy)."""
    pos = pos.detach().requires_grad_()
    energy = model(z, pos).sum()
    (grad,) = torch.autograd.grad(energy, pos)
    return energy.detach(), -grad
