"""MACE (the ``mace-torch`` package's model) on the periodic box of atoms SchNet runs on, with each
interaction's sum of messages over neighbours swapped for this project's neighbour aggregation.

An interaction gathers every edge's sender features, takes their tensor product with the edge's
spherical harmonics (weighted by a radial network of the distance), and sums these messages into the
receiving atom. The model has one place to change that: an interaction whose ``conv_tp`` does the
gather, the product and the sum itself (its ``conv_fusion`` road, where cuEquivariance's fused
convolution plugs in). The swap plugs in there: the stock product, then our aggregation as the sum.

MACE's own accelerated road, cuEquivariance's kernels for the product, the symmetric contraction and the
fused convolution, is a column beside it (``accelerated``), built by the package's converter.
"""
from __future__ import annotations

import torch
from torch import nn

from mage.errors import MageInputError

from . import atoms as A

# hidden features, spherical harmonics, correlation order and cutoff of the published MACE-MP-0 "medium"
# foundation model (its sizes; random weights here, which do not change the time)
PUBLISHED = dict(hidden_irreps="128x0e+128x1o", max_ell=3, correlation=3, num_interactions=2, r_max=6.0,
                 num_bessel=8, num_polynomial_cutoff=5, radial_MLP=[64, 64, 64], MLP_irreps="16x0e")
SMALL = dict(hidden_irreps="8x0e+8x1o", max_ell=2, correlation=2, num_interactions=2, r_max=4.0,
             num_bessel=4, num_polynomial_cutoff=5, radial_MLP=[16, 16], MLP_irreps="4x0e")
ELEMENTS = (1, 8)  # the box's hydrogen and oxygen


def _mace():
    try:
        import mace.modules as M
    except ImportError as e:  # the model's code is the point: without it there is nothing to measure
        raise MageInputError("mace", "mace-torch", f"is needed to build the model ({e})") from None
    return M


def build(config: dict, avg_num_neighbors: float, device="cpu", seed: int = 0):
    """MACE in eval mode with weights drawn from ``seed``: residual interactions (the package's default),
    SiLU gates, zero atomic energies; the class the foundation models ship as (``ScaleShiftMACE``, here
    with scale 1 and shift 0), which the package's cuEquivariance converter requires."""
    if set(config) != set(PUBLISHED):
        raise MageInputError("mace", "config", f"must have the keys {sorted(PUBLISHED)}; missing "
                             f"{sorted(set(PUBLISHED) - set(config))}, unknown {sorted(set(config) - set(PUBLISHED))}")
    M = _mace()
    from e3nn import o3
    torch.manual_seed(seed)
    cfg = dict(config)
    model = M.ScaleShiftMACE(
        atomic_inter_scale=1.0, atomic_inter_shift=0.0, r_max=cfg.pop("r_max"), num_bessel=cfg.pop("num_bessel"), num_polynomial_cutoff=cfg.pop("num_polynomial_cutoff"),
        max_ell=cfg.pop("max_ell"), interaction_cls=M.RealAgnosticResidualInteractionBlock,
        interaction_cls_first=M.RealAgnosticResidualInteractionBlock, num_interactions=cfg.pop("num_interactions"),
        num_elements=len(ELEMENTS), hidden_irreps=o3.Irreps(cfg.pop("hidden_irreps")),
        MLP_irreps=o3.Irreps(cfg.pop("MLP_irreps")), atomic_energies=torch.zeros(len(ELEMENTS)).numpy(),
        avg_num_neighbors=float(avg_num_neighbors), atomic_numbers=list(ELEMENTS),
        correlation=cfg.pop("correlation"), gate=torch.nn.functional.silu, radial_MLP=cfg.pop("radial_MLP"))
    return model.to(device).eval()


def for_compile(model: nn.Module, config: dict, avg_num_neighbors: float, device="cpu") -> nn.Module:
    """The same model built the way the package prepares it for torch.compile (``mace.tools.compile``:
    e3nn's TorchScript code generation off, its registered modules traced to plain graphs; Dynamo cannot
    guard e3nn's generated modules), with ``model``'s weights; swapped too where ``model`` is."""
    from mace.tools.compile import prepare
    twin = prepare(build)(config, avg_num_neighbors, device=device)
    if any(isinstance(m, SummedConv) for m in model.modules()):
        swap(twin)
    # the traced contractions keep their constant masks (the '_zeroed' buffers) inside the graph, so only
    # those keys go unused; a weight the twin lacks would be a different model
    missing, unused = twin.load_state_dict(model.state_dict(), strict=False)
    if missing or any(not k.endswith("_zeroed") for k in unused):
        raise MageInputError("mace", "model", f"has weights its compile-ready copy does not ({missing or unused})")
    for p in twin.parameters():  # as the package's calculator does before compiling: only inputs get grads
        p.requires_grad_(False)
    twin.compile_ready = True  # read by energy_and_forces (through torch.compile's wrapper too)
    return twin.eval()


def accelerated(model: nn.Module, device="cuda"):
    """The same model on MACE's cuEquivariance road (the package's own converter, weights carried over)."""
    try:
        from mace.cli.convert_e3nn_cueq import run
    except ImportError as e:
        raise MageInputError("mace", "cuequivariance", f"is needed for the accelerated road ({e})") from None
    return run(model, device=device, return_model=True).eval()


def graph(z, pos, L: float, cutoff: float) -> dict:
    """The model's input for one box: one-hot elements, the edges (sender, receiver) within ``cutoff``
    under periodic boundaries, and each edge's shift to its minimum image (found once, kept)."""
    edges = A.radius_graph(pos, L, cutoff, model="mace")
    index = {e: i for i, e in enumerate(ELEMENTS)}
    if not set(z.tolist()) <= set(index):
        raise MageInputError("mace", "z", f"holds elements outside {ELEMENTS}")
    kinds = torch.tensor([index[int(e)] for e in z.tolist()], device=pos.device)
    d = pos[edges[1]] - pos[edges[0]]
    unit = -torch.round(d / L)
    n = len(z)
    return dict(node_attrs=nn.functional.one_hot(kinds, len(ELEMENTS)).to(pos.dtype), edge_index=edges,
                unit_shifts=unit.to(pos.dtype), shifts=(unit * L).to(pos.dtype),
                cell=(torch.eye(3, device=pos.device, dtype=pos.dtype) * L)[None],
                batch=torch.zeros(n, dtype=torch.long, device=pos.device),
                ptr=torch.tensor([0, n], device=pos.device), positions=pos)


def neighbours(g: dict) -> float:
    """The mean number of neighbours per atom (the model normalises its sums by it)."""
    return g["edge_index"].shape[1] / max(len(g["positions"]), 1)


def energy_and_forces(model, g: dict, dtype=None):
    """The box's energy and the forces on its atoms, as the model computes them (its own autograd)."""
    dtype = dtype or next(model.parameters()).dtype
    data = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in g.items()}
    data["positions"] = data["positions"].detach().clone()  # the model marks it as requiring grad
    ready = getattr(model, "compile_ready", False)
    if ready:  # the package's compiled calls: inputs marked before the graph, its training-mode autograd
        data["positions"].requires_grad_(True)
        data["node_attrs"] = data["node_attrs"].clone().requires_grad_(True)
    out = model(data, compute_force=True, training=ready)
    return out["energy"].detach(), out["forces"].detach()


class SummedConv(nn.Module):
    """An interaction's gather, product and sum as one module (the model's ``conv_fusion`` call): the
    stock tensor product on each edge, then our aggregation summing the messages into their receivers."""

    def __init__(self, tp: nn.Module):
        super().__init__()
        self.tp, self.sum = tp, A.KernelSum()
        self.irreps_out = getattr(tp, "irreps_out", None)

    def forward(self, node_feats, edge_attrs, tp_weights, edge_index):
        messages = self.tp(node_feats[edge_index[0]], edge_attrs, tp_weights)
        return self.sum(messages, edge_index[1], dim_size=node_feats.shape[0])


def swap(model: nn.Module) -> list[int]:
    """Give every interaction that sums its messages with the package's scatter our aggregation; returns
    the message width (floats per edge) of each interaction swapped."""
    M = _mace()
    done = []
    for m in [m for m in model.modules() if isinstance(m, M.InteractionBlock)]:
        if hasattr(m, "conv_fusion"):  # already fused (cuEquivariance's road): nothing of ours to add
            continue
        m.conv_tp = SummedConv(m.conv_tp)
        m.conv_fusion = "mage"  # the model reads only that the attribute exists
        done.append(int(m.conv_tp.irreps_out.dim))
    return done
