"""neighbor_agg's Triton kernel: every tile config, hub splitting, the validation of the fast path and
of the registered operator, the device-side bounds guard; on a GPU, determinism and calls that
alternate graphs and inputs (which a kernel leaving stale hub flags behind must fail)."""
from __future__ import annotations

import pytest
import torch

from tests.support.kernel_checks import (assert_refuses, check_every_sweep_config, check_forced, cpu_only, gpu, impl,
                                     module, rel_err, spec)
from kernels.neighbor_agg.graph import CSRGraph, regraph

OP = "neighbor_agg"
SMALL = dict(n=37, F=33, deg=3, dist="skewed")


@cpu_only
def test_every_sweep_config():
    check_every_sweep_config(OP, SMALL)


@cpu_only
@pytest.mark.parametrize("config, shape", [
    (dict(SPLIT=2, BLOCK_E=2), dict(n=37, F=33, deg=3, dist="skewed")),  # many hubs
    (dict(SPLIT=1, MAX_BLOCK_F=16), dict(n=20, F=40, deg=4, dist="uniform")),  # feature blocks
    (dict(ORDER=1, BLOCK_R=4, BLOCK_D=2), dict(n=37, F=33, deg=3, dist="skewed")),  # rows in degree order
    (dict(ORDER=1, SPLIT=2, BLOCK_E=2), dict(n=37, F=33, deg=3, dist="skewed")),  # ... with many hubs
])
def test_forced_paths(config, shape):
    check_forced(OP, config, shape)


def _hub_graph(seed=3, n=6, F=5):
    # one hub with 50 edges (cut into chunks of 8 below), a few ordinary rows
    deg = torch.tensor([0, 50, 1, 0, 3, 0])
    rowptr = torch.zeros(n + 1, dtype=torch.int32)
    rowptr[1:] = torch.cumsum(deg, 0)
    g = torch.Generator().manual_seed(seed)
    col = torch.sort(torch.randint(0, n, (int(deg.sum()),), generator=g)).values.to(torch.int32)
    return CSRGraph.build(rowptr, col, torch.rand(int(deg.sum()), generator=g)), torch.randn(n, F, generator=g)


@cpu_only
def test_hub_flags_reset_between_calls():
    graph, x = _hub_graph()
    ref = spec(OP).reference(graph, x)
    for _ in range(3):
        assert rel_err(module(OP).neighbor_agg(graph, x, SPLIT=8, BLOCK_E=4), ref) < 1e-6


def test_bad_inputs_name_op_and_argument():
    assert_refuses(module(OP).neighbor_agg, OP, "graph", "not a graph", torch.ones(3, 2))
    graph, x = _hub_graph()
    assert_refuses(module(OP).neighbor_agg, OP, "x", graph, x[:3])
    assert_refuses(module(OP).neighbor_agg, OP, "out", graph, x, out=torch.empty(6, 4))


def test_fast_path_refuses_a_graph_changed_in_place():
    graph, x = _hub_graph()
    graph.col[0] = 1  # through PyTorch: the version counter moves
    assert_refuses(module(OP).neighbor_agg, OP, "graph", graph, x)


# ---- the registered operator: it takes raw tensors, so it validates them itself --------------------
def _raw():
    graph, x = _hub_graph()
    return graph.rowptr.clone(), graph.col.clone(), graph.w.clone(), x


@pytest.mark.parametrize("change, arg", [
    (lambda r, c, w, x: (r, c.long(), w, x), "col"),  # int64 indices
    (lambda r, c, w, x: (r.long(), c, w, x), "rowptr"),
    (lambda r, c, w, x: (r, c, w.double(), x), "w"),
    (lambda r, c, w, x: (r, c, w, x.double()), "x"),
    (lambda r, c, w, x: (r, c, w[:-1], x), "w"),  # sizes
    (lambda r, c, w, x: (r, c, w, x[0]), "x"),  # rank
    (lambda r, c, w, x: (r, torch.stack([c, c], 1)[:, 0], w, x), "col"),  # not contiguous
    (lambda r, c, w, x: (r, c, w, x.to("meta")), "x"),  # another device
    (lambda r, c, w, x: (r, c.clone().fill_(len(x)), w, x), "col"),  # column out of range
    (lambda r, c, w, x: (r, c.clone().fill_(-1), w, x), "col"),
    (lambda r, c, w, x: (r.flip(0), c, w, x), "rowptr"),  # not monotone from 0 to E
    (lambda r, c, w, x: (r[:-2], c, w, x), "rowptr"),  # does not end at E
])
def test_registered_operator_validates(change, arg):
    args = change(*_raw())
    assert_refuses(torch.ops.mage.triton_neighbor_agg, OP, arg, *args)


@cpu_only
def test_registered_operator_checks_structure_once_per_tensor_version(monkeypatch):
    rowptr, col, w, x = _raw()
    builds = []
    real = CSRGraph.build.__func__
    monkeypatch.setattr(CSRGraph, "build", classmethod(lambda cls, *a, **k: builds.append(1) or real(cls, *a, **k)))
    graph = real(CSRGraph, rowptr, col, w, x.shape[0])
    ref = spec(OP).reference(graph, x)
    for _ in range(3):
        assert rel_err(torch.ops.mage.triton_neighbor_agg(rowptr, col, w, x), ref) < 1e-6
    assert len(builds) == 1
    col[0] = len(x)  # in place: the version moves, so the structure is checked again and refused
    assert_refuses(torch.ops.mage.triton_neighbor_agg, OP, "col", rowptr, col, w, x)
    assert len(builds) == 2


# ---- the device-side bounds guard ------------------------------------------------------------------
@cpu_only
def test_bounds_guard_turns_a_bad_column_into_an_error():
    graph, x = _hub_graph()
    ref = spec(OP).reference(graph, x)
    for cfg in (dict(SPLIT=8, BLOCK_E=4), dict(SPLIT=0)):  # the hub path and the row-block path
        assert rel_err(module(OP).neighbor_agg(graph, x, guard=True, **cfg), ref) < 1e-6
    # written behind PyTorch's version counter (.data), as a library holding a raw pointer could:
    # the graph still looks intact, and without the guard the kernel would read past x
    graph.col.data[30] = 10**7
    assert graph.intact()
    for cfg in (dict(SPLIT=8, BLOCK_E=4), dict(SPLIT=0)):
        e = assert_refuses(module(OP).neighbor_agg, OP, "col", graph, x, guard=True, **cfg)
        assert "guard" in str(e)
    graph.col.data[30] = 0
    assert rel_err(module(OP).neighbor_agg(graph, x, guard=True), spec(OP).reference(graph, x)) < 1e-6


def test_bounds_guard_is_off_by_default():
    assert module(OP).BOUNDS_GUARD is False  # the lead decides from its measured cost


@cpu_only
def test_custom_op_runs_eagerly():
    graph, x = spec(OP).inputs(dict(n=30, F=6, deg=4, dist="skewed"))
    y = torch.ops.mage.triton_neighbor_agg(graph.rowptr, graph.col, graph.w, x)
    assert rel_err(y, spec(OP).reference(graph, x)) < 1e-6


# ---- GPU -------------------------------------------------------------------------------------------
def alternating_errors(n=1 << 20, calls=12, lower_flags=True, seed=0):
    """Relative errors of calls that alternate two graphs sharing one rowptr (so one hub plan, one set
    of flags and partial sums) and two feature sets. A kernel that left its hub flags raised would let
    a hub's last chunk add partial sums left over from the previous call, which held other values."""
    im = impl(OP)
    shape = dict(n=n, F=64, deg=16, dist="skewed")
    g1, x1 = spec(OP).inputs(shape, seed=seed, device="cuda")
    g2 = regraph(g1, torch.Generator(device="cuda").manual_seed(seed + 1))
    x2 = torch.randn(x1.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + 2))
    cases = [(g, x, spec(OP).reference(g, x)) for g in (g1, g2) for x in (x1, x2)]
    im.prepare(g1, x1)
    errs = []
    for i in range(calls):
        g, x, ref = cases[(i * 3) % 4]  # g1x1, g2x2, g2x1, g1x2, ...: graph and input both change
        errs.append(rel_err(module(OP).neighbor_agg(g, x, _lower_flags=lower_flags), ref))
    return errs


@gpu
def test_gpu_alternating_graphs_and_inputs():
    tol = spec(OP).tol("fp32")
    errs = alternating_errors()
    assert max(errs) < tol, errs
    # the same test against the mutant that never lowers its flags: it must fail (else it proves nothing)
    mutant = alternating_errors(lower_flags=False)
    assert max(mutant) > tol, f"the stale-flag mutant passed: {mutant}"


@gpu
@pytest.mark.parametrize("shape_set", ["field", "large"])
def test_gpu_bitwise_deterministic(shape_set):
    im = impl(OP)
    for shape in spec(OP).shapes[shape_set]:
        args = im.prepare(*spec(OP).inputs(shape, device="cuda"))
        first = im.fn(*args)
        for _ in range(9):
            assert torch.equal(im.fn(*args), first), shape


@gpu
def test_gpu_bounds_guard():
    graph, x = spec(OP).inputs(dict(n=8192, F=64, deg=16, dist="skewed"), device="cuda")
    ref = spec(OP).reference(graph, x)
    assert rel_err(module(OP).neighbor_agg(graph, x, guard=True), ref) < spec(OP).tol("fp32")
    graph.col.data[graph.nnz // 2] = 10**8
    assert_refuses(module(OP).neighbor_agg, OP, "col", graph, x, guard=True)


@cpu_only
def test_degree_order_is_a_stable_permutation_by_degree():
    """ORDER's plan: every row once, degrees not increasing, equal degrees in their original order, and
    the hub plan the same as without it."""
    from kernels.neighbor_agg import triton_kernel as k
    graph, _ = _hub_graph()
    plain = k._plan(graph.rowptr, graph.max_degree, 8, 5, 1)
    ordered = k._plan(graph.rowptr, graph.max_degree, 8, 5, 1, order=1)
    assert ordered["order"].tolist() == [1, 4, 2, 0, 3, 5]  # degrees 50, 3, 1, 0, 0, 0
    assert ordered["n_chunks"] == plain["n_chunks"] == 7 and ordered["hub_row"].tolist() == [1]


@cpu_only
def test_structure_free_only_where_no_config_orders_or_splits():
    """A recorded launch may serve a new graph in the same buffers only where every default a launch
    over n rows can choose keeps the rows' order and splits no row: the large size orders its rows (so a
    served graph of that size is captured per structure), other sizes do not."""
    from kernels.neighbor_agg import triton_kernel as k
    large_n = spec(OP).shapes["large"][0]["n"]
    assert k.TILES["fp32"].choose(dict(n=large_n, F=64))["ORDER"] == 1
    assert not k.structure_free(16, large_n)
    assert k.structure_free(16, 16384) and k.structure_free(256, 16384)
    assert not k.structure_free(257, 16384)  # a hub past SPLIT = 256
    assert not k.structure_free(None, 16384)
