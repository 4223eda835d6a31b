"""Eager PyTorch recorded as a CUDA graph ('pytorch_graphs'), on the CPU with stand-in capture primitives
(a "replay" calls the block again on the static buffers, so a result is right only if the inputs were
really copied in and the held arguments really read where they are): the same answer as eager, one
capture per signature, the weights read in place (an update shows, other weights are a new signature), the message-passing graph held in place and a write to it missed; on a GPU, bit for bit with
eager (message passing: within its tolerance, as its eager sum uses atomics)."""
import pytest
import torch

from kernels._triton.graphed import CallAgain, Graphed
from kernels.neighbor_agg.graph import CSRGraph
from mage import facets, ops, registry

SMALL = {"mlp_block": dict(T=9, d=16, hidden=24), "trimul_block": dict(N=6, C=8, H=8),
         "mp_block": dict(n=300, F=16, H=24, deg=8)}


def _wrapped(name, capture):
    registry.load()
    g = registry.get(name, "pytorch_graphs", "fp32").fn
    return Graphed(g.spec, g.fn, hold=g.hold, keep=g.keep, maxsize=g.maxsize, capture=capture, name="pytorch_graphs",
                   plain="pytorch")


@pytest.mark.parametrize("name", list(SMALL))
def test_the_graphed_eager_block_answers_as_eager(name):
    spec, cap = ops.get(name), CallAgain()
    g = _wrapped(name, cap)
    eager = registry.get(name, "pytorch", "fp32").fn
    first = spec.inputs(SMALL[name], seed=1, device="cpu")
    # a second request with the same weights: its own inputs copied in, the weights read in place
    second = tuple(b if a_name in facets.get(spec, "batch").axes else a for a_name, a, b in
                   zip(spec.args, first, spec.inputs(SMALL[name], seed=2, device="cpu")))
    for args in (first, second):
        assert torch.equal(g(*args).clone(), eager(*args))
    assert cap.captures == (2 if name == "mp_block" else 1)  # a new graph structure is a new signature
    # the weights are read where they are: an update in place shows in the next replay, not captured again
    w = next(a for a_name, a in zip(spec.args, second) if a_name not in facets.get(spec, "batch").axes and a.dim() == 2)
    w.mul_(0.5)
    assert torch.equal(g(*second).clone(), eager(*second))
    assert cap.captures == (2 if name == "mp_block" else 1)
    # other weights (another tensor) are another signature, checked and captured
    third = spec.inputs(SMALL[name], seed=3, device="cpu")
    assert torch.equal(g(*third).clone(), eager(*third))
    assert cap.captures == (3 if name == "mp_block" else 2)


def test_a_write_to_the_held_graph_is_missed_and_checked_again():
    spec = ops.get("mp_block")
    cap = CallAgain()
    g = _wrapped("mp_block", cap)
    args = spec.inputs(SMALL["mp_block"], seed=3, device="cpu")
    g(*args)
    graph = args[0]
    assert isinstance(graph, CSRGraph)
    graph.w.mul_(2.0)  # in place: the version moves, the signature misses, validation runs again
    with pytest.raises(Exception, match="modified in place"):
        g(*args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(SMALL))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_graphed_eager_equals_eager_bit_for_bit(name, dtype):
    registry.load()
    spec = ops.get(name)
    im, eager = registry.get(name, "pytorch_graphs", dtype), registry.get(name, "pytorch", dtype)
    for seed in (4, 5):
        args = spec.inputs(SMALL[name], seed=seed, device="cuda", dtype=dtype)
        want = eager.fn(*args)
        got = im.fn(*im.prepare(*args)).clone()
        if name == "mp_block":  # index_add_ sums with atomics on CUDA: the order, so the last bits, vary
            err = float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))
            assert err <= spec.tol(dtype), (name, dtype, seed, err)
        else:
            assert torch.equal(got, want), (name, dtype, seed)
