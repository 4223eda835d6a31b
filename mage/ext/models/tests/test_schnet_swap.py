"""SchNet with our neighbour aggregation as its sum over messages computes the stock model's energy and
forces: on the CPU (Triton's interpreter) at a small box, against the stock model and float64."""
import copy

import pytest
import torch

pytest.importorskip("torch_geometric")

from mage.errors import MageInputError  # noqa: E402
from mage.ext.models import schnet as M  # noqa: E402

needs_kernels = pytest.mark.skipif(
    not (torch.cuda.is_available() or __import__("os").environ.get("TRITON_INTERPRET") == "1"),
    reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


def _box(atoms=200, seed=1):
    z, pos, L = M.box(atoms, seed=seed)
    return z, pos, L, M.radius_graph(pos, L, M.SMALL["cutoff"])


def test_the_box_is_a_liquid_of_the_stated_density_with_no_overlaps():
    z, pos, L, ei = _box(300)
    assert len(z) == 300 and abs(300 / L**3 - M.DENSITY) < 1e-9
    assert ((pos >= 0) & (pos <= L)).all()
    d = M._minimum_image(pos[:, None] - pos[None], L).norm(dim=-1) + torch.eye(300) * 1e9
    assert d.min() > 0.5  # angstrom: the jittered lattice keeps atoms apart
    # the graph is every pair closer than the cutoff, each direction once, no self loops
    want = int(((d < M.SMALL["cutoff"])).sum())
    assert ei.shape[1] == want and not (ei[0] == ei[1]).any()


def test_the_swap_reaches_every_interaction():
    z, pos, L, ei = _box()
    model = M.build(M.SMALL, ei, L)
    assert M.swap(model) == M.SMALL["num_interactions"]
    assert all(isinstance(i.conv.aggr_module, M.KernelSum) for i in model.interactions)


@needs_kernels
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])  # 12 s each interpreted
def test_energy_and_forces_match_the_stock_model_and_float64(seed):
    z, pos, L, ei = _box(atoms=64, seed=seed)  # the interpreter runs one program at a time: a small box
    stock = M.build(M.SMALL, ei, L, seed=seed)
    swapped = copy.deepcopy(stock)
    M.swap(swapped)
    e_ref, f_ref = M.energy_and_forces(copy.deepcopy(stock).double(), z, pos.double())
    e_stock, f_stock = M.energy_and_forces(stock, z, pos)
    e, f = M.energy_and_forces(swapped, z, pos)
    assert torch.isfinite(f).all()
    for got in ((e, f), (e_stock, f_stock)):
        torch.testing.assert_close(got[0].double(), e_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1].double(), f_ref, rtol=1e-4, atol=1e-5 * f_ref.abs().max().item())


@needs_kernels
def test_the_grouping_follows_a_changed_graph():
    """A kept grouping must not outlive its index: a new neighbour list regroups."""
    ks = M.KernelSum()
    x = torch.randn(40, 3)
    for seed in (0, 1):
        idx = torch.randint(0, 7, (40,), generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(ks(x, idx, dim_size=9), torch.zeros(9, 3).index_add_(0, idx, x))
    idx.copy_(torch.randint(0, 7, (40,)))  # the same tensor changed in place
    torch.testing.assert_close(ks(x, idx, dim_size=9), torch.zeros(9, 3).index_add_(0, idx, x))


def test_bad_boxes_and_messages_are_refused_by_name():
    with pytest.raises(MageInputError, match="schnet.*atoms"):
        M.box(0)
    z, pos, L = M.box(50)
    with pytest.raises(MageInputError, match="schnet.*cutoff"):
        M.radius_graph(pos, L, L)
    with pytest.raises(MageInputError, match="neighbor_agg.*messages"):
        M.KernelSum()(torch.randn(4, 2, 2), torch.zeros(4, dtype=torch.long))
