"""Neighbour aggregation's definition: the float64 reference against loops, the cost model by hand, the
graph that can only be held validated, multigraphs, bad input."""
import numpy as np
import pytest
import torch

import mage
from mage import ops
from mage.errors import MageInputError

from ..graph import CSRGraph, random_graph

SPEC = ops.get("neighbor_agg")


def _graph(rowptr, col, w=None, n_src=None):
    col = torch.tensor(col, dtype=torch.int32)
    w = torch.ones(len(col)) if w is None else w
    return CSRGraph.build(torch.tensor(rowptr, dtype=torch.int32), col, w, n_src)


def test_reference_against_loops():
    g, x = SPEC.inputs(dict(n=6, F=2, deg=2, dist="skewed"), seed=5)
    rp, col, w, xn = g.rowptr.tolist(), g.col.tolist(), g.w.double().tolist(), x.double().numpy()
    got = SPEC.reference(g, x).numpy()
    for i in range(6):
        want = sum((w[e] * xn[col[e]] for e in range(rp[i], rp[i + 1])), np.zeros(2))
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-15)


def test_bytes_by_hand():
    # rowptr (n+1), col and w (E each), x and y (n*F each), all 4-byte
    assert SPEC.bytes(dict(n=10, F=4, deg=3)) == 4 * (11 + 60 + 80)


def test_skewed_graph_has_hubs_and_empty_rows():
    g = random_graph(4096, 16, "skewed", torch.Generator().manual_seed(0), "cpu")
    deg = (g.rowptr[1:] - g.rowptr[:-1]).long()
    assert deg.max() > 20 * deg.float().mean() and (deg == 0).sum() > 100
    rows = zip(g.rowptr[:-1].tolist()[:200], g.rowptr[1:].tolist()[:200])
    assert all(bool((g.col[a:b][1:] >= g.col[a:b][:-1]).all()) for a, b in rows)


def test_graph_errors():
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'rowptr' must be non-decreasing"):
        _graph([0, 2, 1, 3], [0, 1, 2])
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'col' holds indices in \[0, 7\], outside \[0, 3\)"):
        _graph([0, 1, 2, 3], [0, 7, 1])
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'col' holds indices in \[-1, 1\]"):
        _graph([0, 1, 2, 3], [0, -1, 1])
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'rowptr' must end at E = 3"):
        _graph([0, 1, 2, 2], [0, 1, 2])
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'rowptr' must start at 0"):
        _graph([1, 1, 2, 3], [0, 1, 2])
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'col' must have dtype int32"):
        CSRGraph.build(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0]), torch.ones(1))
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'w' has 2 entries but col has 3"):
        _graph([0, 1, 2, 3], [0, 1, 2], w=torch.ones(2))


def test_non_contiguous_graph_rejected():
    col = torch.tensor([0, 9, 1, 9, 2, 9], dtype=torch.int32)[::2]
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'col' must be contiguous"):
        CSRGraph.build(torch.tensor([0, 1, 2, 3], dtype=torch.int32), col, torch.ones(3))


def test_a_graph_cannot_be_made_unvalidated():
    # The plain constructor used to accept any tensors, and the kernels then read out of bounds.
    rp, col = torch.tensor([0, 1, 3], dtype=torch.int32), torch.tensor([0, 99, 1], dtype=torch.int32)
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'graph' cannot be constructed directly"):
        CSRGraph(rp, col, torch.ones(3), 2)
    g = _graph([0, 1, 3], [0, 1, 1])
    with pytest.raises(AttributeError):
        g.col = col


def test_a_graph_modified_in_place_is_refused():
    g = _graph([0, 1, 3], [0, 1, 1])
    x = torch.randn(2, 4)
    mage.run("neighbor_agg", "pytorch", g, x)
    g.col[1] = 99  # the validated structure no longer holds
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'graph' was modified in place"):
        mage.run("neighbor_agg", "pytorch", g, x)


def test_input_errors():
    g = _graph([0, 1, 2, 3], [0, 1, 2])
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'x' has size 4 in dim 0"):
        mage.run("neighbor_agg", "pytorch", g, torch.randn(4, 2))
    with pytest.raises(MageInputError, match=r"argument 'graph' must be a CSRGraph"):
        mage.run("neighbor_agg", "pytorch", (g.rowptr, g.col), torch.randn(3, 2))


def test_cusparse_sums_duplicate_edges():
    # A multigraph (row 0 names column 1 twice, row 1 lists its columns unsorted): build accepts it and
    # every implementation must sum the duplicates; cuSPARSE refused it with "invalid value".
    from ..pytorch_impl import _csr_prepare
    g = CSRGraph.build(torch.tensor([0, 3, 5], dtype=torch.int32), torch.tensor([1, 1, 0, 1, 0], dtype=torch.int32),
                       torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    S, _ = _csr_prepare(g, torch.zeros(2, 1))
    assert S.crow_indices().tolist() == [0, 2, 4] and S.col_indices().tolist() == [0, 1, 0, 1]
    x = torch.randn(2, 3)
    torch.testing.assert_close(S.to_dense() @ x, SPEC.reference(g, x).float())


def test_cusparse_gets_a_measured_graph_exactly_as_built():
    # Generated graphs repeat some edges (columns drawn with replacement); cuSPARSE sums them itself, so
    # its matrix must keep every edge: coalescing them would give it less work than the other columns.
    from ..pytorch_impl import _csr_prepare
    g, x = SPEC.inputs(dict(n=512, F=4, deg=16, dist="skewed"), seed=1)
    key = g.row.long() * g.n_src + g.col.long()
    assert key.unique().numel() < g.nnz  # the graph has repeated edges
    S, _ = _csr_prepare(g, x)
    assert torch.equal(S.col_indices(), g.col) and torch.equal(S.crow_indices(), g.rowptr)


def test_a_graph_moves_validated():
    g, _ = SPEC.inputs(dict(n=40, F=2, deg=3, dist="skewed"), seed=2)
    h = g.to("cpu")
    assert isinstance(h, CSRGraph) and h.intact() and torch.equal(h.col, g.col) and h.n_src == g.n_src
