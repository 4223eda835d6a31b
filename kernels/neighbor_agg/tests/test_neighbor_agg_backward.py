"""neighbor_agg's Triton backward: dx and dw against float64 autograd of the reference (normal and
heavy-tailed features, awkward and random graphs, empty rows, hubs in the graph and in its transpose,
outputs poisoned), the transposed graph, bitwise determinism, opcheck and torch.compile, bad gradients;
on a GPU, a record of whether PyTorch's own index_add_ backward repeats bit for bit."""
from __future__ import annotations

import torch

from tests.support.kernel_checks import assert_refuses, cpu_only, gpu, spec
from kernels.neighbor_agg.graph import CSRGraph
from mage.check import poisoned_allocations
from mage import registry
from mage.ext.training import paths

OP = "neighbor_agg"
# Norm-wise error of each gradient against float64: dx_j and dw_e are sums of deg (resp. F) products in
# a fixed order; 1e-5 is an order of magnitude above what hub-sized sums of heavy-tailed values give.
GRAD_TOL = 1e-5
TINY = [dict(n=1, F=1, deg=0, dist="uniform"), dict(n=9, F=2, deg=4, dist="skewed"),
        dict(n=40, F=70, deg=3, dist="uniform"), dict(n=3, F=0, deg=2, dist="uniform")]


def _bwd():
    from kernels.neighbor_agg import triton_backward
    return triton_backward


def triton_grads(graph, x, dy, fn=None):
    w = graph.w.detach().clone().requires_grad_()
    xl = x.detach().clone().requires_grad_()
    g = CSRGraph.build(graph.rowptr, graph.col, w, graph.n_src)
    with poisoned_allocations():  # an unwritten gradient element stays NaN (forward too: see grads_of)
        (fn or _bwd().train)(g, xl).backward(dy)
    return xl.grad, w.grad


def reference_grads(graph, x, dy):
    w = graph.w.detach().double().requires_grad_()
    xd = x.detach().double().requires_grad_()
    y = torch.zeros((graph.n, x.shape[1]), dtype=torch.float64, device=x.device)
    y.index_add_(0, graph.row.long(), xd[graph.col.long()] * w[:, None]).backward(dy.double())
    return xd.grad, w.grad


def assert_close(got, want, what):
    for g, r, name in zip(got, want, ("dx", "dw")):
        assert g is not None and g.dtype == torch.float32 and g.shape == r.shape, (what, name)
        err = float((g.double() - r).norm() / r.norm().clamp_min(1e-300)) if r.numel() else 0.0
        assert err <= GRAD_TOL and bool(torch.isfinite(g).all()), (what, name, err)


def check_graph(graph, x, seed=0, fn=None):
    dy = torch.randn((graph.n, x.shape[1]), generator=torch.Generator(x.device).manual_seed(seed), device=x.device)
    assert_close(triton_grads(graph, x, dy, fn), reference_grads(graph, x, dy), graph)


def check_at(shape, dist, device="cpu", seed=0):
    graph, x = spec(OP).inputs(shape, seed=seed, device=device, dist=dist)
    check_graph(graph, x, seed)


def hub_graph(n, deg, hub_share, device="cpu", seed=0, F=None):
    """Rows of ``deg`` edges whose columns go to node 0 with probability ``hub_share`` (a hub of the
    transpose); row 1 holds 3 n edges (a hub of the graph); every third row is empty."""
    gen = torch.Generator().manual_seed(seed)
    degrees = torch.full((n,), deg, dtype=torch.int64)
    degrees[::3] = 0
    degrees[1] = 3 * n
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(degrees, 0)
    E = int(rowptr[-1])
    col = torch.randint(0, n, (E,), generator=gen)
    col[torch.rand(E, generator=gen) < hub_share] = 0
    w = torch.rand(E, generator=gen) * 2 - 1
    graph = CSRGraph.build(rowptr.int().to(device), col.int().to(device), w.to(device), n)
    x = torch.randn((n, F or 5), generator=gen) * torch.exp(1.5 * torch.randn(n, 1, generator=gen))  # heavy rows
    return graph, x.to(device)


def test_reference_gradients_pass_gradcheck():
    graph, x = spec(OP).inputs(dict(n=6, F=3, deg=3, dist="skewed"))
    # in x: the spec's reference itself; in w (a graph holds float32 weights): its expression in float64
    assert torch.autograd.gradcheck(lambda x: spec(OP).reference(graph, x), (x.double().requires_grad_(),))

    def in_w(w):
        msg = x.double()[graph.col.long()] * w[:, None]
        return torch.zeros((graph.n, x.shape[1]), dtype=torch.float64).index_add_(0, graph.row.long(), msg)
    assert torch.autograd.gradcheck(in_w, (graph.w.double().requires_grad_(),))


def test_training_path_is_registered():
    assert paths.train_fn(registry.get(OP, "triton")) is _bwd().train


def test_transposed_graph_keeps_each_columns_edges_in_order():
    graph, x = spec(OP).inputs(dict(n=37, F=3, deg=3, dist="skewed"))
    t = _bwd().transposed(graph.rowptr, graph.col, graph.n_src)
    assert t is _bwd().transposed(graph.rowptr, graph.col, graph.n_src)  # built once
    perm = t["perm"].long()
    assert torch.equal(graph.col[perm].long(), torch.repeat_interleave(
        torch.arange(graph.n_src), (t["trowptr"][1:] - t["trowptr"][:-1]).long()))
    for j in range(graph.n_src):  # within a column, the original edge order
        seg = perm[t["trowptr"][j]:t["trowptr"][j + 1]]
        assert torch.equal(seg, seg.sort().values)
    assert torch.equal(t["tcol"].long(), graph.row.long()[perm])


@cpu_only
def test_gradients_at_awkward_shapes():
    for i, shape in enumerate(spec(OP).awkward + TINY):
        check_at(shape, "heavy" if i % 2 else "normal", seed=i)


def messages_graph(n, E, F, seed=0, device="cpu"):
    """A sum of E messages into n receivers (MACE's and SchNet's): every message in exactly one edge,
    taken in a shuffled order; receivers of uneven degree, some with none; heavy-tailed messages."""
    gen = torch.Generator().manual_seed(seed)
    receivers = torch.sort(torch.randint(0, max(n - 1, 1), (E,), generator=gen) ** 2 % n).values
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(receivers, minlength=n), 0)
    col = torch.randperm(E, generator=gen)
    w = torch.rand(E, generator=gen) * 2 - 1
    graph = CSRGraph.build(rowptr.int().to(device), col.int().to(device), w.to(device), E)
    x = torch.randn((E, F), generator=gen) * torch.exp(1.5 * torch.randn(E, 1, generator=gen))
    return graph, x.to(device)


@cpu_only
def test_a_sum_of_messages_takes_the_permuted_rows_and_matches_float64(monkeypatch):
    """dx of a sum of messages is each message's receiver's gradient, one row each: the permuted-rows
    kernel, at feature counts around its 256-wide tile; a graph whose columns repeat takes the general
    road."""
    taken = []
    real = _bwd()._permuted
    monkeypatch.setattr(_bwd(), "_permuted", lambda *a: taken.append(1) or real(*a))
    for seed, (n, E, F) in enumerate([(1, 1, 1), (7, 40, 3), (30, 333, 257), (5, 17, 600)]):
        graph, x = messages_graph(n, E, F, seed)
        check_graph(graph, x, seed)
        assert len(taken) == seed + 1, (n, E, F)
    graph, x = messages_graph(9, 50, 5, seed=9)
    col = graph.col.clone()
    col[0] = col[1]  # one message in two edges, another in none
    check_graph(CSRGraph.build(graph.rowptr, col, graph.w, graph.n_src), x)
    assert len(taken) == 4


@cpu_only
def test_hubs_in_the_graph_and_its_transpose():
    # node 0 receives ~60% of 300 x 1 + 3 * 300 edges: past the default split of 256, so dx's launch
    # splits the transpose's hub into chunks; row 1 is a hub of the forward
    graph, x = hub_graph(300, 1, 0.6, F=3)
    assert _bwd().transposed(graph.rowptr, graph.col, graph.n_src)["max_degree"] > 256
    check_graph(graph, x)


@cpu_only
def test_bitwise_deterministic():
    graph, x = hub_graph(60, 3, 0.5, F=4)
    dy = torch.randn(60, 4)
    first = triton_grads(graph, x, dy)
    for _ in range(9):
        again = triton_grads(graph, x, dy)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


@cpu_only
def test_opcheck_and_compiled_backward():
    _bwd()  # registers both operators (run alone, no earlier test has imported them)
    graph, x = spec(OP).inputs(dict(n=7, F=3, deg=2, dist="uniform"))
    args = (graph.rowptr, graph.col, graph.w.clone().requires_grad_(), x.clone().requires_grad_())
    torch.library.opcheck(torch.ops.mage.triton_neighbor_agg.default, args)
    torch.library.opcheck(torch.ops.mage.triton_neighbor_agg_backward.default,
                          (graph.rowptr, graph.col, graph.w, x, torch.randn(7, 3), True, False))
    compiled = torch.compile(_bwd().train, backend="aot_eager")
    check_graph(graph, x, fn=compiled)


@cpu_only
def test_second_derivatives_match_float64():
    """Gradients of a gradient (create_graph): the backward operator's own autograd against index_add in
    float64, on a graph with hubs both ways and heavy-tailed rows; a function of both first gradients, so
    every path of the second derivative (into w, x and dy) is exercised."""
    graph, x = hub_graph(23, 3, 0.3, F=6, seed=4)
    gen = torch.Generator().manual_seed(5)
    dy, u, v = torch.randn(23, 6, generator=gen), torch.randn(23, 6, generator=gen), torch.randn(graph.nnz, generator=gen)

    def second(w, xx, dyy, agg):
        y = agg(w, xx)
        gx, gw = torch.autograd.grad(y, (xx, w), dyy, create_graph=True)
        return torch.autograd.grad((gx * u).sum() + (gw * v * gw).sum(), (w, xx, dyy))

    def ours(w, xx):
        return _bwd().train(CSRGraph.build(graph.rowptr, graph.col, w, graph.n_src), xx)

    def ref(w, xx):
        y = torch.zeros((graph.n, xx.shape[1]), dtype=xx.dtype)
        return y.index_add(0, graph.row.long(), xx[graph.col.long()] * w[:, None])

    leaf = lambda t, dt: t.detach().to(dt).clone().requires_grad_()  # noqa: E731
    got = second(leaf(graph.w, torch.float32), leaf(x, torch.float32), leaf(dy, torch.float32), ours)
    want = second(leaf(graph.w, torch.float64), leaf(x, torch.float64), leaf(dy, torch.float64), ref)
    for g, r, name in zip(got, want, ("w", "x", "dy")):
        err = float((g.double() - r).norm() / r.norm())
        assert g.dtype == torch.float32 and err <= GRAD_TOL, (name, err)


@cpu_only
def test_only_x_needs_a_gradient():
    graph, x = spec(OP).inputs(dict(n=9, F=3, deg=2, dist="uniform"))
    xl = x.clone().requires_grad_()
    _bwd().train(graph, xl).sum().backward()
    assert_close((xl.grad, torch.zeros(graph.nnz)), (reference_grads(graph, x, torch.ones(9, 3))[0],
                                                      torch.zeros(graph.nnz, dtype=torch.float64)), "x only")


def test_bad_gradients_name_op_and_argument():
    graph, x = spec(OP).inputs(dict(n=4, F=3, deg=2, dist="uniform"))
    fn = _bwd().neighbor_agg_backward
    assert_refuses(fn, OP, "dy", graph.rowptr, graph.col, graph.w, x, torch.ones(4, 5))
    assert_refuses(fn, OP, "dy", graph.rowptr, graph.col, graph.w, x, torch.ones(4, 3, dtype=torch.float64))
    assert_refuses(fn, OP, "x", graph.rowptr, graph.col, graph.w, x.double(), torch.ones(4, 3))


@gpu
def test_gpu_random_graphs():
    for i, shape in enumerate(spec(OP).random_shapes(32, seed=16)):
        check_at(shape, "heavy" if i % 2 else "normal", device="cuda", seed=i)
    for shape in spec(OP).awkward + spec(OP).shapes["field"]:
        check_at(shape, "heavy", device="cuda")
    check_graph(*hub_graph(20000, 8, 0.3, device="cuda", F=64))
    for seed, (n, E, F) in enumerate([(300, 27000, 2048), (1000, 4001, 5120), (64, 5000, 130)]):
        check_graph(*messages_graph(n, E, F, seed, device="cuda"), seed)  # MACE's widths: permuted rows


@gpu
def test_gpu_bitwise_deterministic_and_index_add_record():
    """Ours: bitwise identical over 10 runs on a large skewed graph with hubs in its transpose.
    PyTorch eager's backward (index_select's backward is an index_add_ with atomics): reported, not
    asserted, since whether atomics reorder is up to the scheduler."""
    graph, x = spec(OP).inputs(spec(OP).shapes["large"][1], device="cuda", dist="heavy")
    hub = hub_graph(1 << 18, 16, 0.05, device="cuda", F=64)
    for name, (g, xx) in (("large skewed", (graph, x)), ("transpose hub", hub)):
        dy = torch.randn((g.n, xx.shape[1]), device="cuda")
        first = triton_grads(g, xx, dy)
        for _ in range(9):
            again = triton_grads(g, xx, dy)
            assert all(torch.equal(a, c) for a, c in zip(first, again)), name
    from kernels.neighbor_agg.pytorch_impl import expression
    dy = torch.randn((graph.n, x.shape[1]), device="cuda")
    runs = [triton_grads(graph, x, dy, fn=expression) for _ in range(10)]
    for k, name in enumerate(("dx", "dw")):
        same = sum(torch.equal(runs[0][k], r[k]) for r in runs[1:])
        diff = max(float((runs[0][k] - r[k]).abs().max()) for r in runs[1:])
        print(f"\nRECORD pytorch index_add_ backward {name}: {same}/9 runs bitwise equal to the first, "
              f"largest difference {diff:.3e}")
