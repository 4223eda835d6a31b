"""Neighbour aggregation's facets (``mage.facets``): how the book names and draws it, how the harness
rotates its inputs for cold-cache timing and costs the graph it generated, its speed targets, and its
backward's cost for the training experiment. Its mathematics is ``spec.py``."""
import torch

from mage import facets
from mage.book.target import Target
from mage.ops import randn

from .graph import regraph
from .spec import SPEC, compulsory_bytes


def other_set(shape, probe, seed, dtype):
    """Cold-cache rotation: the probe's degrees (so the edge count, and every shape a compiled graph
    specialises on, stays the same) with fresh columns, weights and features."""
    g, x = probe
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return regraph(g, gen), randn(tuple(x.shape), gen, "cuda", "normal").to(x.dtype)


def actual_shape(shape, inputs):
    """The cost model at the generated graph's actual mean degree, not the nominal one."""
    g = inputs[0]
    return dict(shape, deg=g.nnz / max(g.n, 1))


facets.declare(
    SPEC.name, label="neighbour aggregation", short="neighbours", order=50, marker="x", work="bytes",
    other_set=other_set, actual_shape=actual_shape,
    targets=(Target("triton", "speedup", 10.0, baseline="pytorch"),
             Target("triton", "speedup", 1.0, baseline="cusparse"),
             Target("triton", "speedup", 1.5, baseline="cusparse", shape=dict(n=1 << 20, F=64, deg=16,
                                                                               dist="skewed")),
             Target("triton", "speedup", 1.0, baseline="torch_compile"),
             Target("triton", "speedup", 1.0, baseline="pytorch", shape_set="field"),
             Target("triton", "speedup", 1 / 1.1, baseline="torch_compile", shape_set="field"),
             Target("rust", "speedup", 1 / 1.15, baseline="triton", shape=dict(n=1 << 20, F=64, deg=16,
                                                                                  dist="uniform")),
             Target("rust", "speedup", 1.0, baseline="pytorch", shape_set="field", view="event_span")),
    # backward (dx = A^T dy, the gradient the harness takes): the transposed graph's offsets, its edges
    # (index and weight) and one dy row read per edge's source, dx written: the forward's bytes again
    grad_flops=lambda s: 2 * s["n"] * s["deg"] * s["F"],
    grad_bytes=compulsory_bytes,
)
