"""The operations' definitions: references against independent loops, cost models by hand, bad input."""
import math

import numpy as np
import pytest
import torch

import mage
from mage import ops
from mage.errors import MageInputError


def test_matmul_reference_against_loops():
    A, B = ops.get("matmul").inputs(dict(M=3, K=4, N=2), seed=3)
    a, b = A.double().numpy(), B.double().numpy()
    want = [[sum(a[i, k] * b[k, j] for k in range(4)) for j in range(2)] for i in range(3)]
    np.testing.assert_allclose(ops.matmul_reference(A, B).numpy(), want, rtol=1e-12)


def test_bias_gelu_reference_against_math_erf():
    x, b = ops.get("bias_gelu").inputs(dict(R=2, C=3), seed=1)
    got = ops.bias_gelu_reference(x, b).numpy()
    for r in range(2):
        for c in range(3):
            z = float(x[r, c]) + float(b[c])
            assert got[r, c] == pytest.approx(0.5 * z * (1 + math.erf(z / math.sqrt(2))), rel=1e-12)


def test_layernorm_reference_against_numpy():
    x, g, b = ops.get("layernorm").inputs(dict(R=4, C=7), seed=2)
    xn = x.double().numpy()
    mu = xn.mean(1, keepdims=True)
    var = xn.var(1, keepdims=True)  # biased, as LayerNorm uses
    want = (xn - mu) / np.sqrt(var + ops.EPS_LAYERNORM) * g.double().numpy() + b.double().numpy()
    np.testing.assert_allclose(ops.layernorm_reference(x, g, b).numpy(), want, rtol=1e-12)


def test_triangle_reference_against_loops():
    A, B = ops.get("triangle").inputs(dict(N=3, C=2), seed=4)
    a, b = A.double().numpy(), B.double().numpy()
    got = ops.triangle_reference(A, B).numpy()
    for i in range(3):
        for j in range(3):
            for c in range(2):
                assert got[i, j, c] == pytest.approx(sum(a[i, k, c] * b[j, k, c] for k in range(3)), rel=1e-12)


def test_neighbor_agg_reference_against_loops():
    g, x = ops.get("neighbor_agg").inputs(dict(n=6, F=2, deg=2, dist="skewed"), seed=5)
    rp, col, w, xn = g.rowptr.tolist(), g.col.tolist(), g.w.double().tolist(), x.double().numpy()
    got = ops.neighbor_agg_reference(g, x).numpy()
    for i in range(6):
        want = sum((w[e] * xn[col[e]] for e in range(rp[i], rp[i + 1])), np.zeros(2))
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-15)


def test_cost_models_by_hand():
    assert ops.get("matmul").cost(dict(M=2, K=3, N=4)) == (2 * 2 * 3 * 4, 4 * (6 + 12 + 8))
    assert ops.get("matmul").cost(dict(M=2, K=3, N=4), "bf16")[1] == 2 * (6 + 12 + 8)
    assert ops.get("bias_gelu").bytes(dict(R=10, C=8)) == 4 * (80 + 8 + 80)
    assert ops.get("layernorm").bytes(dict(R=10, C=8)) == 4 * (80 + 16 + 80)
    assert ops.get("triangle").cost(dict(N=5, C=3)) == (2 * 125 * 3, 4 * 3 * 25 * 3)
    # rowptr (n+1), col and w (E each), x and y (n*F each), all 4-byte
    assert ops.get("neighbor_agg").bytes(dict(n=10, F=4, deg=3)) == 4 * (11 + 60 + 80)


def test_inputs_are_seeded_and_fresh():
    spec = ops.get("layernorm")
    a = spec.inputs(dict(R=3, C=5), seed=7)[0]
    assert torch.equal(a, spec.inputs(dict(R=3, C=5), seed=7)[0])
    assert not torch.equal(a, spec.inputs(dict(R=3, C=5), seed=8)[0])


def test_skewed_graph_has_hubs_and_empty_rows():
    g = ops.random_graph(4096, 16, "skewed", torch.Generator().manual_seed(0), "cpu")
    deg = (g.rowptr[1:] - g.rowptr[:-1]).long()
    assert deg.max() > 20 * deg.float().mean() and (deg == 0).sum() > 100
    cols_sorted = all(bool((g.col[a:b][1:] >= g.col[a:b][:-1]).all()) for a, b in zip(g.rowptr[:-1].tolist()[:200], g.rowptr[1:].tolist()[:200]))
    assert cols_sorted


def _bad(op, impl, *inputs, match):
    with pytest.raises(MageInputError, match=match) as e:
        mage.run(op, impl, *inputs)
    assert e.value.op == op


BAD = {
    "matmul": [
        (lambda: (torch.randn(3, 4).double(), torch.randn(4, 2)), r"matmul: argument 'A' must have dtype"),
        (lambda: (torch.randn(3, 4), torch.randn(5, 2)), r"matmul: argument 'B' has size 5 in dim 0"),
        (lambda: (torch.randn(3, 4, 1), torch.randn(4, 2)), r"matmul: argument 'A' must have 2 dimensions"),
        (lambda: (torch.randn(3, 4), "B"), r"matmul: argument 'B' must be a torch.Tensor"),
    ],
    "bias_gelu": [
        (lambda: (torch.randn(3, 4), torch.randn(5)), r"bias_gelu: argument 'b' has size 5"),
        (lambda: (torch.randn(3, 4).half(), torch.randn(4)), r"bias_gelu: argument 'x' must have dtype float32"),
    ],
    "layernorm": [
        (lambda: (torch.randn(3, 4), torch.randn(4), torch.randn(3)), r"layernorm: argument 'beta' has size 3"),
        (lambda: (torch.randn(4), torch.randn(4), torch.randn(4)), r"layernorm: argument 'x' must have 2 dimensions"),
        (lambda: (torch.randn(3, 0), torch.randn(0), torch.randn(0)), r"layernorm: argument 'x' must have at least one column"),
    ],
    "triangle": [
        (lambda: (torch.randn(3, 4, 2), torch.randn(3, 4, 2)), r"triangle: argument 'A' has size 4 in dim 1"),
        (lambda: (torch.randn(3, 3, 2), torch.randn(3, 3, 5)), r"triangle: argument 'B' must have A's shape"),
    ],
}


@pytest.mark.parametrize("op,make,match", [(op, m, r) for op, cases in BAD.items() for m, r in cases])
def test_bad_input_names_op_and_argument(op, make, match):
    _bad(op, "pytorch", *make(), match=match)


def test_out_buffer_is_validated():
    x = torch.randn(3, 4)
    with pytest.raises(MageInputError, match=r"bias_gelu: argument 'out' must have shape \(3, 4\)"):
        ops.check_out("bias_gelu", torch.empty(4, 3), (3, 4), torch.float32, x.device)


def _graph(rowptr, col, w=None, n_src=None):
    col = torch.tensor(col, dtype=torch.int32)
    w = torch.ones(len(col)) if w is None else w
    return ops.CSRGraph.build(torch.tensor(rowptr, dtype=torch.int32), col, w, n_src)


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
        ops.CSRGraph.build(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0]), torch.ones(1))
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'w' has 2 entries but col has 3"):
        _graph([0, 1, 2, 3], [0, 1, 2], w=torch.ones(2))


def test_neighbor_agg_input_errors():
    g = _graph([0, 1, 2, 3], [0, 1, 2])
    _bad("neighbor_agg", "pytorch", g, torch.randn(4, 2), match=r"neighbor_agg: argument 'x' has size 4 in dim 0")
    _bad("neighbor_agg", "pytorch", (g.rowptr, g.col), torch.randn(3, 2), match=r"argument 'graph' must be a mage.ops.CSRGraph")


def test_non_contiguous_graph_rejected():
    col = torch.tensor([0, 9, 1, 9, 2, 9], dtype=torch.int32)[::2]
    with pytest.raises(MageInputError, match=r"neighbor_agg: argument 'col' must be contiguous"):
        ops.CSRGraph.build(torch.tensor([0, 1, 2, 3], dtype=torch.int32), col, torch.ones(3))
