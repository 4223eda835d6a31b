"""The blocks' batching rules for the service (each block's ``batch`` facet): the triangle update stacks
complexes on a new leading axis, the message-passing layer joins graphs into their disjoint union. A batch of B
requests gives each request the output of its own call, against the float64 reference; the executor
moves every request into its slot and back (on the CPU, host-clock events); bad requests are refused
naming the block and the argument. Triton blocks under the interpreter at tiny shapes only."""
from __future__ import annotations

import os

import pytest
import torch

from kernels.mp_block._union import GraphUnion
from kernels.neighbor_agg.graph import CSRGraph
from mage import facets, registry
from mage.errors import MageInputError
from mage.ext.service.gpu import CudaExecutor, check_batching
from mage.ops import OPS

registry.load()
TRI, MP = OPS["trimul_block"], OPS["mp_block"]


def _impls(op, dtype="fp32"):
    return [im for im in registry.impls(op) if im.dtype == dtype and not im.runs_on("cpu")]


def _rel(got, ref):
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def _within_roundings(got, want, msg):
    """got equals want up to a few roundings of their dtype, measured against want's largest element.
    A stacked problem and the same problem alone may be summed in different orders by the CPU's BLAS (by
    batch size, thread count and machine) and by the interpreter's dot (by a row's place in the tile), so
    bitwise equality is not a claim a CPU test can make; on the GPU our kernels' order is fixed and the
    GPU tests ask for the same bits."""
    # relative to the largest element: FP32 as the fused road's bound was before; bf16, one flip of the last bit
    rel = {torch.float64: 1e-13, torch.float32: 1e-5, torch.bfloat16: torch.finfo(torch.bfloat16).eps}[want.dtype]
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=0, atol=rel * scale, msg=msg)


# ----------------------------------------------------------------------------------- triangle update
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_a_stack_of_complexes_is_each_complex_on_its_own(dtype, dist):
    shape = dict(N=4, C=5, H=3)
    reqs = [TRI.inputs(shape, seed=20 + r, dtype=dtype, dist=dist) for r in range(3)]
    weights = reqs[0][2:]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    ref = TRI.reference(z, mask, *weights)
    for r, want in zip(reqs, ref):  # the batched reference is the complexes' own references
        _within_roundings(TRI.reference(r[0], r[1], *weights), want, "float64 reference")
    for im in _impls("trimul_block", dtype):
        out = torch.full(z.shape, float("nan"), dtype=z.dtype)
        got = im.fn(z, mask, *weights, out=out)
        assert _rel(got, ref) <= TRI.tol(dtype), im.name
        for c, r in enumerate(reqs):
            _within_roundings(got[c], im.fn(r[0], r[1], *weights), f"{im.name}, complex {c}")


@pytest.mark.parametrize("bad,arg", [
    (lambda z, m: (torch.cat([z, z[:, :1]], 1), torch.cat([m, m[:, :1]], 1)), "z"),  # N x N' complexes
    (lambda z, m: (z, m[:1]), "mask"),  # a mask for one complex of two
    (lambda z, m: (z, m[:, :, :3]), "mask"),  # a mask of another N
    (lambda z, m: (z[..., :4], m), "gamma_in"),  # C = 4 channels where the weights have 5
    (lambda z, m: (z[None], m[None]), "z"),  # a batch of batches
])
def test_bad_stacks_name_the_block_and_the_argument(bad, arg):
    shape = dict(N=4, C=5, H=3)
    reqs = [TRI.inputs(shape, seed=r) for r in range(2)]
    z, mask = bad(torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs]))
    with pytest.raises(MageInputError) as e:
        TRI.validate(z, mask, *reqs[0][2:])
    assert e.value.op == "trimul_block" and e.value.arg == arg


# -------------------------------------------------------------------------------- message passing
def _graphs(n=23, F=6, H=4, k=3, dtype="fp32", dist="normal"):
    return [MP.inputs(dict(n=n, F=F, H=H, deg=5), seed=30 + r, dtype=dtype, dist=dist) for r in range(k)]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_the_union_of_graphs_is_each_graph_on_its_own(dtype, dist):
    reqs = _graphs(dtype=dtype, dist=dist)
    weights = reqs[0][2:]
    join = GraphUnion()
    pool = join([{0: r[0], 1: r[1]} for r in reqs], pinned=False)
    assert len({p[0].nnz for p in pool}) == 1  # padded to one edge count
    for p, r in zip(pool, reqs):  # zero-weight padding: the same layer
        _within_roundings(MP.reference(p[0], p[1], *weights), MP.reference(r[0], r[1], *weights), "padded graph")
    got = join.batch(pool[::-1], 4, "cpu")  # three requests in four slots: the fourth is padding
    g, h = got[0], got[1]
    assert g.n == 4 * 23 and h.shape == (4 * 23, 6)
    rebuilt = CSRGraph.build(g.rowptr.clone(), g.col.clone(), g.w.clone(), g.n, op="mp_block")  # valid
    assert torch.equal(rebuilt.row, g.row) and rebuilt.max_degree <= g.max_degree
    ref = MP.reference(g, h, *weights)
    for j, r in enumerate(reqs[::-1]):
        own = MP.reference(r[0], r[1], *weights)
        assert torch.allclose(ref[j * 23:(j + 1) * 23], own, rtol=1e-12, atol=1e-12)
    for im in _impls("mp_block", dtype):
        out = torch.full(h.shape, float("nan"), dtype=h.dtype)
        y = im.fn(g, h, *weights, out=out)
        assert _rel(y, ref) <= MP.tol(dtype), im.name
        for j, r in enumerate(reqs[::-1]):
            own = im.fn(r[0], r[1], *weights)
            assert _rel(y[j * 23:(j + 1) * 23], MP.reference(r[0], r[1], *weights)) <= MP.tol(dtype)
            assert torch.allclose(y[j * 23:(j + 1) * 23].double(), own.double(), rtol=1e-5, atol=1e-5), im.name


def _sources_past_own_nodes():
    """A graph on 5 nodes whose neighbour 6 lies outside them (valid as a graph of 7 sources): shifted
    into a union, it would read the next request's nodes."""
    return CSRGraph.build(torch.tensor([0, 1, 1, 1, 1, 1], dtype=torch.int32), torch.tensor([6], dtype=torch.int32),
                          torch.ones(1), 7, op="mp_block")


@pytest.mark.parametrize("bad,arg", [
    (lambda rs: [*rs, {0: _sources_past_own_nodes(), 1: torch.randn(5, 6)}], "graph"),
    (lambda rs: [*rs, {0: rs[0][0], 1: torch.randn(23, 7)}], "h"),  # wrong channel count
    (lambda rs: [*rs, {0: rs[0][0], 1: torch.randn(22, 6)}], "h"),  # features for another node count
    (lambda rs: [*rs, {0: rs[0][0], 1: rs[0][1].double()}], "h"),  # another precision
    (lambda rs: [*rs, {0: _graphs(n=24, k=1)[0][0], 1: torch.randn(24, 6)}], "graph"),  # another n
    (lambda rs: [{0: rs[0][0].rowptr, 1: rs[0][1]}], "graph"),  # not a built graph
    (lambda rs: [], "graph"),
])
def test_bad_requests_name_the_block_and_the_argument(bad, arg):
    reqs = [{0: r[0], 1: r[1]} for r in _graphs()]
    with pytest.raises(MageInputError) as e:
        GraphUnion()(bad(reqs), pinned=False)
    assert e.value.op == "mp_block" and e.value.arg == arg


def test_a_request_from_another_pool_is_refused():
    join = GraphUnion()
    pool = join([{0: r[0], 1: r[1]} for r in _graphs()], pinned=False)
    other = GraphUnion()([{0: r[0], 1: r[1]} for r in _graphs(n=24, k=2)], pinned=False)
    with pytest.raises(MageInputError) as e:
        join.batch([pool[0], other[0]], 2, "cpu")
    assert e.value.op == "mp_block" and e.value.arg == "graph"


# ------------------------------------------------------------------------------------------ executor
def _served_right(ex, spec, requests):
    """Serve ``requests``; each one's output in host memory against the reference of its own inputs."""
    ex.run(requests)
    for j, r in enumerate(requests):
        req = ex.pool[r % len(ex.pool)]
        batching = facets.get(spec, "batch")
        if batching.mode == "join":
            one = batching.join.batch([req], 1, "cpu")
            inputs = [one.get(i, t) for i, t in enumerate(ex.dev)]
        else:
            inputs = [req.get(i, t) for i, t in enumerate(ex.dev)]
        want = spec.reference(*inputs)
        got = ex.host_out.narrow(0, j * ex.out_per, ex.out_per).double().reshape(want.shape)
        assert _rel(got, want) <= spec.tol(ex.impl.dtype), (spec.name, ex.impl.name, requests, r)


@pytest.mark.parametrize("spec,shape,items", [(TRI, dict(N=8, C=6, H=5), 3), (MP, dict(n=8, F=5, H=7, deg=4), 17)])
def test_the_executor_serves_stacked_and_joined_requests(spec, shape, items):
    """Each request of a (padded) batch gets its own output back in its slice of host memory."""
    check_batching(spec)
    im = next(im for im in _impls(spec.name) if im.name == "pytorch")
    ex = CudaExecutor(spec, im, shape, items, batch=4, host_mem="pageable", pool=3, device="cpu")
    assert ex.sizes == [1, 2, 4] and len(ex.pool) == 3
    ex.warm(calls=1)
    assert ex.verify(spec) <= spec.tol("fp32")
    for requests in ([0], [2, 1, 0], [0, 1, 2, 0], [4, 3]):  # 3 requests padded to 4; 4 is 1 again
        _served_right(ex, spec, requests)
    batching = facets.get(spec, "batch")
    assert batching.items_in(dict(shape, **{batching.size: items})) == (items ** 2 if spec is TRI else items)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the Triton blocks need TRITON_INTERPRET=1 here")
def test_the_triton_blocks_serve_a_padded_batch():
    for spec, shape, items in ((TRI, dict(N=3, C=4, H=2), 3), (MP, dict(n=8, F=5, H=3, deg=4), 9)):
        im = next(im for im in _impls(spec.name) if im.name == "triton")
        ex = CudaExecutor(spec, im, shape, items, batch=2, host_mem="pageable", pool=2, device="cpu")
        assert ex.verify(spec) <= spec.tol("fp32")
        _served_right(ex, spec, [0, 1])
        _served_right(ex, spec, [1])
