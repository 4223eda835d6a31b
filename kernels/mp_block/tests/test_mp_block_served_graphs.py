"""The graphed custom layer ('triton_graphs') as a server runs it: every batch is a new union graph
(kernels/mp_block/_union.py) written into the buffers of its slot count. Where the aggregation's launch
does not depend on the structure (no hub rows), each batch must replay the graph recorded for the first
one, not capture its own (a capture a batch held the served p50 at 3.2 ms against 0.65 ms for the plain
column, run 20261204T140356Z-h200), and still give each batch its own answer. A graph written after it
was built is refused, and a graph with hubs is still captured per structure."""
from __future__ import annotations

import pytest
import torch

from tests.support.block_graphs import like
from kernels._triton.graphed import CallAgain
from tests.support.kernel_checks import gpu
from kernels.mp_block._union import GraphUnion
from kernels.neighbor_agg import triton_kernel as agg
from kernels.neighbor_agg.graph import CSRGraph
from mage import ops
from mage.errors import MageInputError

SHAPE = dict(n=37, F=33, H=17, deg=24)


def _served(device, dtype="fp32", requests=4, slots=2):
    """Requests of one pool and the layer's weights, as the service draws them."""
    spec = ops.OPS["mp_block"]
    draws = [spec.inputs(SHAPE, seed=s, device="cpu", dtype=dtype) for s in range(1, requests + 1)]
    layer = tuple(t.to(device) for t in draws[0][2:])
    union = GraphUnion()
    pool = union([{0: d[0], 1: d[1]} for d in draws], pinned=False)
    return union, pool, layer


def _batches(union, pool, slots, device):
    for first in range(0, len(pool), slots):
        b = union.batch(pool[first:first + slots], slots, device)
        yield b[0], b[1]


def test_served_batches_replay_one_recorded_graph():
    union, pool, layer = _served("cpu")
    g = like("mp_block", "fp32", CallAgain())
    answers = []
    for graph, h in _batches(union, pool, 2, "cpu"):
        assert agg.structure_free(graph.max_degree, graph.n)
        y = g(graph, h, *layer).clone()
        assert torch.equal(y, g.fn(graph, h, *layer))  # this batch's answer, not the first batch's
        answers.append(y)
    assert len(answers) == 2 and not torch.equal(answers[0], answers[1])
    assert g.capture.captures == 1 and len(g.cache) == 1


def test_a_graph_written_after_it_was_built_is_refused():
    union, pool, layer = _served("cpu")
    g = like("mp_block", "fp32", CallAgain())
    graph, h = next(_batches(union, pool, 2, "cpu"))
    g(graph, h, *layer)
    graph.w.mul_(2.0)  # behind the graph's back: its version counter moves
    with pytest.raises(MageInputError, match="mp_block.*graph.*modified in place"):
        g(graph, h, *layer)


def test_a_graph_with_hubs_is_captured_per_structure():
    """A hub's chunks are planned from its structure: a new graph object is a new capture."""
    spec = ops.OPS["mp_block"]
    layer = spec.inputs(dict(n=300, F=8, H=4, deg=2), seed=1, device="cpu", dtype="fp32")[2:]
    n = 300  # row 0 holds every node: a hub past every default SPLIT
    rowptr = torch.tensor([0, n] + [n] * (n - 1), dtype=torch.int32)
    col, w = torch.arange(n, dtype=torch.int32), torch.rand(n)
    first = CSRGraph.build(rowptr, col, w, n)
    second = CSRGraph.build(rowptr, col, w, n)  # the same buffers, another object
    assert not agg.structure_free(first.max_degree, first.n)
    g = like("mp_block", "fp32", CallAgain())
    h = torch.randn(n, 8)
    g(first, h, *layer)
    g(second, h, *layer)
    assert g.capture.captures == 2


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_served_batches_replay_one_graph_bit_for_bit(dtype):
    from tests.support.block_graphs import registered
    union, pool, layer = _served("cuda", dtype, requests=6, slots=2)
    g = registered("mp_block", dtype)
    g.clear()
    before = g.captures
    for graph, h in _batches(union, pool, 2, "cuda"):
        y = g(graph, h, *layer).clone()
        assert torch.equal(y, g.fn(graph, h, *layer))
    assert g.captures - before == 1
