"""The message-passing layer: its float64 reference against the operations' own references composed,
the radius graph (degree near the target, deterministic, symmetric, the cell list against all pairs,
bounded chunks), eager and the Triton block against the reference at awkward shapes (normal and
heavy-tailed, isolated nodes), bad input naming the block and the argument; on a GPU, every column at
30 random shapes per precision, determinism and launches per call."""
from __future__ import annotations

import math

import pytest
import torch

from tests.support.kernel_checks import assert_refuses, check_shapes, cpu_only, gpu, gpu_failures, rel_err, usable
from kernels.mp_block import _radius
from kernels.neighbor_agg.graph import CSRGraph
from mage import facets, ops, registry, run
from mage.check import check

OP = "mp_block"
SPEC = ops.OPS[OP]
SMALL = dict(n=37, F=33, H=17, deg=24)
CELLS = dict(n=400, F=16, H=24, deg=24)  # a box of 4 cells a side: the cell-list road


def composed(graph, h, gamma, beta, W1, b1, W2, b2):
    """The block from the operations' references: aggregation, LayerNorm, matmul, bias + GELU, matmul."""
    O = ops.OPS
    m = O["neighbor_agg"].reference(graph, h)
    a = O["layernorm"].reference(m, gamma, beta)
    g = O["bias_gelu"].reference(O["matmul"].reference(a, W1.double().T), b1)
    return h.double() + O["matmul"].reference(g, W2.double().T) + b2.double()


# ---- the reference ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("shape", SPEC.awkward + [CELLS], ids=ops.shape_key)
def test_reference_is_the_composition_of_the_operation_references(shape, dist, dtype):
    inputs = SPEC.inputs(shape, seed=3, dtype=dtype, dist=dist)
    ref, comp = SPEC.reference(*inputs), composed(*inputs)
    assert ref.dtype == torch.float64 and ref.shape == inputs[1].shape
    assert torch.allclose(ref, comp, rtol=1e-12, atol=1e-12)


def test_reference_aggregates_in_chunks(monkeypatch):
    inputs = SPEC.inputs(CELLS, seed=1)
    whole = SPEC.reference(*inputs)
    monkeypatch.setattr("kernels.mp_block.spec.EDGE_CHUNK", 77)  # many chunks, one cut mid-row
    torch.testing.assert_close(SPEC.reference(*inputs), whole, rtol=1e-12, atol=1e-12)  # chunks may regroup sums


def test_an_isolated_node_gets_the_update_of_beta():
    # m_i = 0, so LN(m_i) = beta exactly: h'_i = h_i + W2 gelu(W1 beta + b1) + b2
    graph, h, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(n=40, F=3, H=5, deg=2), seed=0)
    alone = torch.nonzero(graph.rowptr[1:] == graph.rowptr[:-1]).flatten()
    assert alone.numel() > 0
    z = W1.double() @ beta.double() + b1.double()
    update = W2.double() @ (0.5 * z * (1 + torch.erf(z / math.sqrt(2)))) + b2.double()
    ref = SPEC.reference(graph, h, gamma, beta, W1, b1, W2, b2)
    assert torch.allclose(ref[alone], h[alone].double() + update, rtol=1e-12, atol=1e-12)


def test_inputs_keep_activations_of_order_one():
    graph, h, *layer = SPEC.inputs(CELLS, seed=0)
    y = SPEC.reference(graph, h, *layer)
    update = y - h.double()
    assert 0.3 < float(update.std()) < 3.0 and 0.5 < float(y.std()) < 3.0, (float(update.std()), float(y.std()))


def test_the_spec_is_a_block():
    assert SPEC.kind == "block" and facets.of(OP).order >= 100 and set(SPEC.dtypes) == {"fp32", "bf16"}
    s = SPEC.shapes["field"][0]
    assert s == dict(n=16384, F=128, H=128, deg=24) and SPEC.shapes["large"][0]["n"] == 1 << 20
    assert [x["n"] for x in SPEC.shapes["sweep"]] == [4 ** k for k in range(6, 11)]
    assert SPEC.flops(s) >= 4 * s["n"] * s["F"] * s["H"] + 2 * s["n"] * s["deg"] * s["F"]
    # bf16 halves the features and weights, not the graph (int32 indices, FP32 edge weights)
    graph_bytes = 4 * (s["n"] + 1) + 8 * s["n"] * s["deg"]
    assert SPEC.cost(s, "fp32")[1] - graph_bytes == 2 * (SPEC.cost(s, "bf16")[1] - graph_bytes)


def test_cost_model_sees_the_actual_degree():
    inputs = SPEC.inputs(CELLS, seed=0)
    assert facets.of(OP).actual_shape(CELLS, inputs)["deg"] == inputs[0].nnz / CELLS["n"]


# ---- the radius graph ------------------------------------------------------------------------------
def _graph(n, deg, seed=0):
    return SPEC.inputs(dict(n=n, F=1, H=1, deg=deg), seed=seed)[0]


@pytest.mark.parametrize("deg", [16, 24, 32])
def test_mean_degree_is_near_the_target(deg):
    g = _graph(4096, deg)
    assert abs(g.nnz / g.n - deg) < 0.05 * deg, g.nnz / g.n
    d = (g.rowptr[1:] - g.rowptr[:-1]).double()
    assert 0.5 * deg < float(d.var()) < 2.0 * deg  # Poisson-like spread: points in a box, not a lattice


def test_graph_is_deterministic_for_a_seed():
    a, b, c = _graph(2000, 24, seed=5), _graph(2000, 24, seed=5), _graph(2000, 24, seed=6)
    assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("rowptr", "col", "w"))
    assert not torch.equal(a.col, c.col) or not torch.equal(a.rowptr, c.rowptr)


def _all_pairs_dense(pos, deg):
    n, L, r = pos.shape[0], _radius.box_side(pos.shape[0]), _radius.radius(deg)
    d = pos[None] - pos[:, None]
    d -= L * torch.round(d / L)
    d2 = (d * d).sum(-1)
    A = (d2 < r * r) & ~torch.eye(n, dtype=torch.bool)
    return A, torch.where(A, (1 - d2 / (r * r)) ** 2, torch.zeros(()))


@pytest.mark.parametrize("n,deg", [(700, 24), (150, 24), (60, 40), (2, 24), (300, 0)])
def test_cell_list_finds_exactly_the_pairs_within_the_cutoff(n, deg, monkeypatch):
    pos = torch.rand(n, 3, generator=torch.Generator().manual_seed(n)) * _radius.box_side(n)
    monkeypatch.setattr(_radius, "CANDIDATES", 4000)  # many chunks: a pair must not fall between them
    pos, rowptr, col, w = _radius.radius_graph(pos, deg)
    A, W = _all_pairs_dense(pos, deg)
    got = torch.zeros(n, n)
    row = torch.repeat_interleave(torch.arange(n), (rowptr[1:] - rowptr[:-1]).long())
    got[row, col.long()] = w
    assert torch.equal(got != 0, A) and torch.allclose(got, W.float(), rtol=1e-5, atol=0)
    assert torch.equal(got, got.T)  # symmetric, weights included
    for a, b in zip(rowptr[:-1].tolist(), rowptr[1:].tolist()):
        assert bool((col[a + 1:b] > col[a:b - 1]).all())  # columns sorted, no pair twice


def test_nodes_are_numbered_in_cell_order():
    # neighbours sit near each other in memory: the median |i - j| is a small share of n
    g = _graph(8192, 24)
    gap = (g.col.long() - g.row.long()).abs().double()
    assert float(gap.median()) < 0.1 * g.n


# ---- the columns at awkward shapes -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_eager_at_awkward_shapes(dist, dtype):
    impl = registry.get(OP, "pytorch", dtype)
    check_shapes(impl, SPEC.awkward + [CELLS], dist, trials=2)


@cpu_only
@pytest.mark.parametrize("road", ["cublas", "fused"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_triton_block_at_awkward_shapes(dist, road):
    impl = registry.get(OP, "triton", "fp32").variant(GEMM=road)
    check_shapes(impl, SPEC.awkward, dist, trials=1)


@cpu_only
def test_triton_block_refuses_an_unknown_road_and_tile_key():
    from kernels.mp_block.triton_block import mp_block
    inputs = SPEC.inputs(dict(n=6, F=4, H=3, deg=2), seed=0)
    assert "GEMM" in str(assert_refuses(mp_block, OP, "config", *inputs, GEMM="cutlass"))
    assert_refuses(mp_block, OP, "config", *inputs, BLOCK_Q=4)


@cpu_only
def test_triton_operator_matches_the_launcher():
    from kernels.mp_block.triton_block import mp_block
    graph, *rest = SPEC.inputs(dict(n=40, F=3, H=5, deg=2), seed=2, dist="heavy")
    ref = SPEC.reference(graph, *rest)
    by_op = torch.ops.mage.triton_mp_block(graph.rowptr, graph.col, graph.w, *rest)
    assert rel_err(by_op, ref) < SPEC.tol("fp32")
    assert torch.equal(by_op, mp_block(graph, *rest))


# ---- bad input ---------------------------------------------------------------------------------------
def _good():
    return SPEC.inputs(dict(n=6, F=4, H=3, deg=6), seed=0)


def _bad_cases():
    graph, h, gamma, beta, W1, b1, W2, b2 = _good()
    other = CSRGraph.build(graph.rowptr, graph.col, graph.w, graph.n + 1)
    yield "graph", ("not a graph", h, gamma, beta, W1, b1, W2, b2)
    yield "graph", (other, h, gamma, beta, W1, b1, W2, b2)  # not square: n_src != n
    yield "h", (graph, h[:-1], gamma, beta, W1, b1, W2, b2)  # a row short of the graph's nodes
    yield "h", (graph, h.half(), gamma, beta, W1, b1, W2, b2)
    yield "h", (graph, h[:, :0], gamma[:0], beta[:0], W1[:, :0], b1, W2[:0], b2[:0])  # no channels
    yield "gamma", (graph, h, gamma[:-1], beta, W1, b1, W2, b2)  # wrong channel count
    yield "beta", (graph, h, gamma, beta.bfloat16(), W1, b1, W2, b2)  # mixed precisions
    yield "W1", (graph, h, gamma, beta, W1[:, :-1], b1, W2, b2)  # mismatched weights
    yield "W1", (graph, h, gamma, beta, W1[:0], b1[:0], W2[:, :0], b2)  # no hidden units
    yield "b1", (graph, h, gamma, beta, W1, b1[:-1], W2, b2)
    yield "W2", (graph, h, gamma, beta, W1, b1, W2[:, :-1], b2)
    yield "W2", (graph, h, gamma, beta, W1, b1, W2.T, b2)
    yield "b2", (graph, h, gamma, beta, W1, b1, W2, b2[None])
    yield "W2", (graph, h, gamma, beta, W1, b1, W2.to("meta"), b2)


def _run(impl):
    return lambda *inputs, out=None: run(OP, impl, *inputs, out=out)


@pytest.mark.parametrize("impl", ["pytorch", pytest.param("triton", marks=cpu_only)])
def test_bad_inputs_name_the_block_and_the_argument(impl):
    for arg, inputs in _bad_cases():
        assert_refuses(_run(impl), OP, arg, *inputs)
    assert_refuses(_run(impl), OP, "out", *_good(), out=torch.empty(6, 5))


def test_a_graph_changed_in_place_is_refused_naming_the_block():
    inputs = _good()
    inputs[0].col[0] = 1  # through PyTorch: the version counter moves
    assert_refuses(_run("pytorch"), OP, "graph", *inputs)


@cpu_only
@cpu_only
def test_operator_validates_raw_csr_tensors():
    graph, *rest = _good()
    bad = graph.col.clone()
    bad[0] = graph.n  # a column past the last node
    assert_refuses(torch.ops.mage.triton_mp_block, OP, "col", graph.rowptr, bad, graph.w, *rest)
    assert_refuses(torch.ops.mage.triton_mp_block, OP, "w", graph.rowptr, graph.col, graph.w[:-1], *rest)
    assert_refuses(torch.ops.mage.triton_mp_block, OP, "rowptr", graph.rowptr.long(), graph.col, graph.w, *rest)
    assert_refuses(torch.ops.mage.triton_mp_block, OP, "h", graph.rowptr, graph.col, graph.w, rest[0][:-1],
                   *rest[1:])


# ---- on a GPU ---------------------------------------------------------------------------------------
def _cuda_impls():
    return [(i.name, i.dtype) for i in registry.impls(OP) if i.callable]


@gpu
@pytest.mark.parametrize("name,dtype", _cuda_impls())
def test_gpu_every_column_at_random_shapes(name, dtype):
    impl = registry.get(OP, name, dtype)
    usable(impl)  # unavailable: a failure with its reason, unless MAGE_GPU_EXCLUDE names it
    failures = gpu_failures(impl, SPEC.random_shapes(30, seed=1) + SPEC.awkward + SPEC.shapes["field"])
    assert not failures, failures[:5]


@gpu
def test_gpu_triton_block_is_ieee_fp32_whatever_tf32_was_left_at():
    torch.backends.cuda.matmul.allow_tf32 = True  # as a TF32 row leaves it
    r = check(registry.get(OP, "triton", "fp32"), SPEC.shapes["field"][0], trials=2, device="cuda")
    assert r.passed, r.reason


@gpu
def test_gpu_triton_block_is_bitwise_repeatable():
    # fixed-order sums in the aggregation, one cuBLAS algorithm per shape: the same bits every call
    impl = registry.get(OP, "triton", "fp32")
    args = impl.prepare(*SPEC.inputs(SPEC.shapes["field"][0], seed=0, device="cuda"))
    first = impl.fn(*args).clone()
    assert all(torch.equal(impl.fn(*args), first) for _ in range(3))


# The Triton block's launches are its own (triton_block.launches); the other columns' counts are
# printed and held stable between two profiles.
@gpu
@pytest.mark.parametrize("name,dtype", _cuda_impls())
def test_gpu_launches_per_call_are_stable(name, dtype):
    from kernels.mp_block.triton_block import launches
    from mage.profile import profile
    impl = registry.get(OP, name, dtype)
    inputs = SPEC.inputs(SPEC.shapes["field"][0], seed=0, device="cuda", dtype=dtype)
    args = impl.prepare(*inputs) if impl.prepare else inputs
    counts = []
    for _ in range(2):
        p = profile(lambda: impl.fn(*args), iters=20)
        assert "launches_unstable" not in p.flags, (p.flags, p.per_iter_launches)
        counts.append(p.launches)
    print(f"\n{OP}/{name}/{dtype}: {counts[0]:g} launches per call: {p.kernel_names}")
    assert counts[0] == counts[1] and counts[0] == int(counts[0]), counts
    if name == "triton":
        assert counts[0] == launches(impl.config_at(SPEC.shapes["field"][0])), (counts[0], p.kernel_names)


@gpu
def test_gpu_fused_road_launches_per_call_and_every_sweep_config():
    from kernels.mp_block.triton_block import launches
    from mage.profile import profile
    impl = registry.get(OP, "triton", "fp32")
    for cfg in impl.sweep:
        failures = gpu_failures(impl.variant(**cfg), SPEC.random_shapes(8, seed=41) + SPEC.shapes["field"])
        assert not failures, (cfg, failures[:3])
    fused = impl.variant(GEMM="fused")
    args = fused.prepare(*SPEC.inputs(SPEC.shapes["field"][0], seed=0, device="cuda"))
    p = profile(lambda: fused.fn(*args), iters=20)
    assert p.launches == launches(fused.config) == 4, (p.launches, p.kernel_names)
