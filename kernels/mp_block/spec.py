"""The message-passing layer, closest to a SchNet interaction or a graph convolution: each node sums its
neighbours' features weighted by a smooth function of their distance, normalises the sum, passes it
through a two-layer MLP and adds the result to its own features (no equivariant features, no learned
radial basis, no higher-order products: not MACE, which the model chapter runs as its package builds it):

    m_i = sum over j in N(i) of w_ij h_j,   h'_i = h_i + W2 gelu(W1 LN(m_i) + b1) + b2

h [n, F]; LN over the F channels with gamma, beta [F]; W1 [H, F], b1 [H], W2 [F, H], b2 [F] (the
layout of ``torch.nn.Linear``: out features first). The graph is a radius graph of random points in a
periodic box (``_radius``), held as the project's validated ``CSRGraph``.

Precisions: 'fp32', and 'bf16' for the features and the layer's weights (h, gamma, beta, W1, b1, W2,
b2 and the output), accumulation in FP32. The graph's edge weights stay FP32 at both: ``CSRGraph``
holds w as float32 (a weight is a cutoff function of a distance, computed once when the graph is
built, and is read once per edge, so halving it saves little).
"""
from __future__ import annotations

import math

import torch

from kernels.neighbor_agg.graph import CSRGraph
from mage.errors import MageInputError
from mage.ops import FLOAT, Op, dim, randn, same_device, tensor, torch_dtype

from . import _radius

OP = "mp_block"
EPS = 1e-5  # LayerNorm's epsilon, as torch.nn.LayerNorm's default
EDGE_CHUNK = 1 << 20  # edges a step in the float64 reference: its messages stay about 1 GB at F = 128


# ------------------------------------------------------------------------------------------- inputs
def build_graph(n: int, deg: float, gen: torch.Generator, device) -> CSRGraph:
    """The radius graph of n seeded random points at mean degree ``deg`` (see ``_radius``): the points
    are drawn with ``gen`` (on its device), the graph is built on the host and moved to ``device``."""
    pos = torch.rand((n, 3), generator=gen, device=gen.device).cpu() * _radius.box_side(n)
    _, rowptr, col, w = _radius.radius_graph(pos, deg)
    return CSRGraph.build(rowptr.to(device), col.to(device), w.to(device), n, op=OP)


def layer_inputs(F, H, gen, device, dt):
    """gamma, beta, W1, b1, W2, b2 scaled like a real init (weights with variance 1 / fan-in), so that
    LN(m) and the hidden activations are O(1) and the update is O(1) beside h."""
    gamma = 1.0 + 0.1 * randn((F,), gen, device, "normal")
    beta = 0.1 * randn((F,), gen, device, "normal")
    W1 = randn((H, F), gen, device, "normal", scale=1.0 / math.sqrt(max(F, 1)))
    b1 = 0.1 * randn((H,), gen, device, "normal")
    W2 = randn((F, H), gen, device, "normal", scale=1.0 / math.sqrt(max(H, 1)))
    b2 = 0.1 * randn((F,), gen, device, "normal")
    return tuple(t.to(dt) for t in (gamma, beta, W1, b1, W2, b2))


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype(OP, dtype)
    graph = build_graph(s["n"], s["deg"], gen, device)
    h = randn((s["n"], s["F"]), gen, device, dist).to(dt)  # 'heavy': features with a heavy tail
    return (graph, h) + layer_inputs(s["F"], s["H"], gen, device, dt)


# ---------------------------------------------------------------------------------------- reference
def aggregate64(graph, h):
    """m_i = sum over j in N(i) of w_ij h_j in float64, a chunk of edges at a time (so the messages of
    a million-node graph never exist all at once)."""
    m = torch.zeros((graph.n, h.shape[1]), dtype=torch.float64, device=h.device)
    col, row, w = graph.col.long(), graph.row.long(), graph.w.double()
    for e in range(0, graph.nnz, EDGE_CHUNK):
        s = slice(e, e + EDGE_CHUNK)
        m.index_add_(0, row[s], h[col[s]].double() * w[s, None])
    return m


def reference(graph, h, gamma, beta, W1, b1, W2, b2):
    """h + W2 gelu(W1 LN(m) + b1) + b2 in float64 (exact GELU; biased variance in LN)."""
    m = aggregate64(graph, h)
    mean = m.mean(dim=1, keepdim=True)
    var = ((m - mean) ** 2).mean(dim=1, keepdim=True)
    a = (m - mean) / torch.sqrt(var + EPS) * gamma.double() + beta.double()
    z = a @ W1.double().T + b1.double()
    g = 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))
    return h.double() + g @ W2.double().T + b2.double()


# ---------------------------------------------------------------------------------------- validation
def check_graph(graph) -> None:
    if not isinstance(graph, CSRGraph):
        raise MageInputError(OP, "graph", "must be a CSRGraph (build it with CSRGraph.build(rowptr, col, w), "
                             "which validates the structure once)")
    if not graph.intact():
        raise MageInputError(OP, "graph", "was modified in place after CSRGraph.build validated it; build it again")
    if graph.n_src != graph.n:
        raise MageInputError(OP, "graph", f"must map the nodes onto themselves (n_src = n); has n = {graph.n}, "
                             f"n_src = {graph.n_src}")


def check_layers(n: int, device, h, gamma, beta, W1, b1, W2, b2) -> None:
    """Everything but the graph's structure: dtypes, ranks, sizes against h [n, F] and W1's H, and one
    device (the graph's, given as ``device``)."""
    tensor(OP, "h", h, FLOAT, 2)
    named = dict(gamma=gamma, beta=beta, W1=W1, b1=b1, W2=W2, b2=b2)
    for name, t in named.items():
        tensor(OP, name, t, FLOAT, 2 if name.startswith("W") else 1)
        if t.dtype != h.dtype:  # one precision for the features and the layer
            raise MageInputError(OP, name, f"has dtype {str(t.dtype).replace('torch.', '')}, but h has "
                                 f"{str(h.dtype).replace('torch.', '')}")
    if h.device != device:
        raise MageInputError(OP, "h", f"is on {h.device} but the graph is on {device}")
    same_device(OP, dict(h=h, **named))
    dim(OP, "h", h, 0, n, "n, the graph's nodes")
    F, H = h.shape[1], W1.shape[0]
    if F == 0:
        raise MageInputError(OP, "h", "must have at least one channel to normalise over")
    for name in ("gamma", "beta", "b2"):
        dim(OP, name, named[name], 0, F, "F, the channels of h")
    dim(OP, "W1", W1, 1, F, "F, the channels of h")
    if H == 0:
        raise MageInputError(OP, "W1", "must have at least one row (the hidden width H)")
    dim(OP, "b1", b1, 0, H, "H, the rows of W1")
    dim(OP, "W2", W2, 0, F, "F, the channels of h")
    dim(OP, "W2", W2, 1, H, "H, the rows of W1")


def validate(graph, h, gamma, beta, W1, b1, W2, b2):
    check_graph(graph)
    check_layers(graph.n, graph.device, h, gamma, beta, W1, b1, W2, b2)


# -------------------------------------------------------------------------------------- cost, shapes
def flops(s):
    """Aggregation (a multiply-add an edge and channel), LN (as the layernorm spec counts it), the two
    GEMMs, bias + GELU (as bias_gelu counts it), b2 and the residual."""
    n, F, H, deg = s["n"], s["F"], s["H"], s["deg"]
    return int(n * (2 * deg * F + 8 * F + 2 * F * H + 6 * H + 2 * H * F + 2 * F))


def nbytes(s, isz=4):
    """Compulsory: rowptr, col (int32) and w (FP32 at every precision), h read once, the layer's
    weights, the output written once."""
    n, F, H, deg = s["n"], s["F"], s["H"], s["deg"]
    return int(4 * (n + 1) + 8 * n * deg + isz * (2 * n * F + 2 * F * H + 3 * F + H))


def random_shape(rnd):
    return dict(n=rnd.randint(1, 6000), F=rnd.randint(1, 200), H=rnd.randint(1, 300), deg=rnd.randint(0, 40))


def _at(n):
    return dict(n=n, F=128, H=128, deg=24)


SPEC = Op(
    name=OP, kind="block", args=("graph", "h", "gamma", "beta", "W1", "b1", "W2", "b2"),
    equation=r"h'_i = h_i + W_2\,\mathrm{gelu}\big(W_1\,\mathrm{LN}\big(\textstyle\sum_{j \in N(i)} w_{ij} h_j\big)"
             r" + b_1\big) + b_2",
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda g, h, *layer: ((g.n, h.shape[1]), h.dtype),
    flops=flops, bytes=nbytes,
    shapes={"field": [_at(16384)], "large": [_at(1 << 20)],
            "sweep": [_at(n) for n in (4096, 16384, 65536, 262144, 1 << 20)]},
    # one node; isolated nodes (mean degree 2: about one node in seven has no neighbour); tiny and odd
    # channel counts; every node isolated; a box narrower than two cutoffs; no nodes
    awkward=[dict(n=1, F=1, H=1, deg=24), dict(n=40, F=3, H=5, deg=2), dict(n=37, F=33, H=17, deg=24),
             dict(n=9, F=7, H=2, deg=0), dict(n=12, F=130, H=9, deg=30), dict(n=0, F=8, H=8, deg=24)],
    random_shape=random_shape,
    dtypes=("fp32", "bf16"),
    # fp32: the project's FP32 tolerance. The block composes a handful of FP32 operations on O(1)
    # values, each with rounding near FP32's epsilon, so it needs no more; a GEMM slipping to TF32
    # (about 3e-4) must still fail. bf16: every stored tensor (h, the weights, the output) holds 8
    # bits of mantissa, so the output's own rounding is already ~1e-3 of it; 2e-2 is the project's
    # bf16 tolerance, the operations' own.
    tolerance={"fp32": 5e-5, "bf16": 2e-2},
)
