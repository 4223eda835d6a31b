"""Neighbour aggregation's bf16 column (bf16 features; the graph's int32 indices and FP32 weights as at
FP32; every sum FP32): eager PyTorch and the Triton kernel (under the interpreter) against float64 on the
bf16 values, the bytes it moves, what it refuses, and a row of many edges, where summing in bf16 fails."""
from __future__ import annotations

import pytest
import torch

import mage
from tests.support.kernel_checks import assert_refuses, check_bf16_columns, cpu_only, rel_err, spec
from mage import registry

from ..graph import CSRGraph

OP = "neighbor_agg"
# two feature blocks of the default 64 (F = 70), and a skewed graph (empty rows, a heavy one)
SHAPES = [dict(n=9, F=70, deg=6, dist="uniform"), dict(n=50, F=17, deg=6, dist="skewed")]


def test_bf16_inputs_output_and_bytes():
    g, x = spec(OP).inputs(dict(n=5, F=3, deg=2), dtype="bf16")
    assert x.dtype == spec(OP).empty_out(g, x).dtype == torch.bfloat16 and g.w.dtype == torch.float32
    # rowptr, col and w stay 4 bytes; x and y 2
    assert spec(OP).cost(dict(n=10, F=4, deg=3), "bf16")[1] == 4 * (11 + 60) + 2 * 80


@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_columns_against_float64(dist):
    check_bf16_columns(OP, SHAPES, dist, (dict(SPLIT=2, BLOCK_E=2), SHAPES[1]))  # rows past two edges are hubs


def _one_busy_row(edges=4096, F=4):
    """Row 0 receives ``edges`` messages of about 1 (row 1 none): a sum near 4096, where bf16's spacing is
    32, so a bf16 running sum stops growing at 256 (256 + 1 rounds back to 256)."""
    gen = torch.Generator().manual_seed(4)
    rowptr = torch.tensor([0, edges, edges], dtype=torch.int32)
    col = torch.randint(0, 2, (edges,), generator=gen, dtype=torch.int32)
    graph = CSRGraph.build(rowptr, col, 1.0 + 0.01 * torch.rand(edges, generator=gen))
    return graph, (1.0 + 0.1 * torch.rand(2, F, generator=gen)).bfloat16()


def test_eager_bf16_sums_many_edges_in_fp32():
    graph, x = _one_busy_row()
    ref = spec(OP).reference(graph, x)
    got = mage.run(OP, "pytorch", graph, x, dtype="bf16")
    assert got.dtype == torch.bfloat16 and rel_err(got, ref) < 2**-8  # one rounding of the FP32 sum
    # what index_add_ into a bf16 tensor gives: a rounding after every edge
    msg = (x.index_select(0, graph.col) * graph.w[:, None]).bfloat16()
    bf16_sum = torch.zeros((graph.n, x.shape[1]), dtype=torch.bfloat16).index_add_(0, graph.row, msg)
    assert rel_err(bf16_sum, ref) > 0.5


@cpu_only
def test_triton_bf16_sums_many_edges_in_fp32():
    graph, x = _one_busy_row(edges=600)  # past the default SPLIT of 256: a hub of three chunks
    assert rel_err(registry.get(OP, "triton", "bf16").fn(graph, x), spec(OP).reference(graph, x)) < 2**-7


def test_refusals_name_op_and_argument():
    g, x = spec(OP).inputs(dict(n=5, F=3, deg=2), dtype="bf16")
    assert_refuses(spec(OP).validate, OP, "x", g, x.half())  # bf16 or FP32 features, nothing else
    assert_refuses(mage.run, OP, "x", OP, "pytorch", g, x.half())
    # the cuSPARSE column is FP32 only: torch.sparse.mm takes one dtype, and the weights are FP32
    from ..pytorch_impl import _csr_prepare
    assert_refuses(_csr_prepare, OP, "x", g, x)
    assert not registry.impls(OP, names=["cusparse", "rust"], dtype="bf16")
