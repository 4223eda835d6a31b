"""Weighted neighbour aggregation, y_i = sum over j in N(i) of w_ij x_j: each node receives from its
neighbours (message passing in graph networks, interactions in particle models)."""
from __future__ import annotations

import torch

from mage.errors import MageInputError
from mage.ops import FLOAT, Op, dim, randn, same_device, tensor, torch_dtype

from .graph import CSRGraph, random_graph


def make_inputs(s, gen, device, dtype, dist):
    # bf16 is the features' storage only: the graph keeps its int32 indices and FP32 weights (as the
    # message-passing block's graph does), and every column sums in FP32
    dt = torch_dtype("neighbor_agg", dtype)
    graph = random_graph(s["n"], s["deg"], s.get("dist", "uniform"), gen, device)
    x = randn((s["n"], s["F"]), gen, device, dist)
    return graph, x.to(dt)


def reference(graph, x):
    """y_i = sum over j in N(i) of w_ij x_j, in float64."""
    y = torch.zeros((graph.n, x.shape[1]), dtype=torch.float64, device=x.device)
    msg = x.double()[graph.col.long()] * graph.w.double()[:, None]
    return y.index_add_(0, graph.row.long(), msg)


def magnitude(graph, x):
    """sum over j in N(i) of |w_ij x_j|, in float64: the size of y_i's terms, by which its rounding goes (a
    node of high degree sums many terms that may cancel)."""
    y = torch.zeros((graph.n, x.shape[1]), dtype=torch.float64, device=x.device)
    msg = x.double().abs()[graph.col.long()] * graph.w.double().abs()[:, None]
    return y.index_add_(0, graph.row.long(), msg)


def validate(graph, x):
    if not isinstance(graph, CSRGraph):
        raise MageInputError("neighbor_agg", "graph", "must be a CSRGraph (build it with CSRGraph.build(rowptr, "
                             "col, w), which validates the structure once)")
    graph.check_intact()
    tensor("neighbor_agg", "x", x, FLOAT, 2)  # the graph's weights are FP32 whatever x's dtype
    same_device("neighbor_agg", {"col": graph.col, "x": x})
    dim("neighbor_agg", "x", x, 0, graph.n_src, "the graph's source nodes")


def random_shape(rnd):
    return dict(n=rnd.randint(1, 60000), F=rnd.randint(1, 200), deg=rnd.randint(0, 40),
                dist=rnd.choice(["uniform", "skewed"]))


def compulsory_bytes(s, isz=4):
    """rowptr and col are int32 and w FP32 at any precision, x and y of x's dtype (``isz`` bytes); x is
    read once in this count, though a gather may read more."""
    return 4 * ((s["n"] + 1) + 2 * s["n"] * s["deg"]) + isz * 2 * s["n"] * s["F"]


def _both(n):
    return [dict(n=n, F=64, deg=16, dist="uniform"), dict(n=n, F=64, deg=16, dist="skewed")]


SPEC = Op(
    name="neighbor_agg", args=("graph", "x"), equation=r"y_i = \sum_{j \in N(i)} w_{ij}\, x_j",
    make_inputs=make_inputs, reference=reference, validate=validate, magnitude=magnitude,
    out_spec=lambda g, x: ((g.n, x.shape[1]), x.dtype),
    flops=lambda s: 2 * s["n"] * s["deg"] * s["F"],
    bytes=compulsory_bytes,
    shapes={"field": _both(8192), "large": _both(1 << 20),
            "sweep": [dict(n=n, F=64, deg=16, dist="uniform")
                      for n in (256, 1024, 4096, 16384, 65536, 262144, 524288, 1 << 20)]},
    awkward=[dict(n=1, F=1, deg=0, dist="uniform"), dict(n=5, F=3, deg=1, dist="skewed"),
             dict(n=37, F=33, deg=3, dist="skewed"), dict(n=64, F=130, deg=5, dist="uniform"),
             dict(n=0, F=8, deg=2, dist="uniform")],
    random_shape=random_shape,
    dtypes=("fp32", "bf16"),  # bf16: the features' storage (see make_inputs)
)
