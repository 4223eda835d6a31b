"""What the blocks' CUDA-graph tests share (kernels/<block>/tests/test_<block>_graphs.py). The column
('triton_graphs', kernels/_triton/graphed.py) is registered beside 'triton' with its own look; on the CPU
(interpreter, the wrapper's CallAgain capture) it is bit for bit the plain block, a second input set of
one signature gets its own answer, bad inputs are refused naming the block and the argument before any
capture; on a GPU it is bit for bit the 'triton' column at a few shapes per precision (field included),
passes the float64 check and makes one graph launch a call. ``block_graph_tests`` is that one set of
tests, which each block's file instantiates at its own shapes."""
from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest
import torch

from kernels._triton.graphed import CallAgain, Graphed
from tests.support.kernel_checks import cpu_only, gpu, gpu_failures
from mage import facets, ops, registry
from mage.errors import MageInputError


def registered(op: str, dtype: str) -> Graphed:
    return importlib.import_module(f"kernels.{op}.triton_graphs").GRAPHED[dtype]


def like(op: str, dtype: str, capture) -> Graphed:
    """A wrapper like the registered column's (same block, held arguments, kept plan), with ``capture``."""
    g = registered(op, dtype)
    return Graphed(g.spec, g.fn, hold=g.hold, keep=g.keep, maxsize=g.maxsize, capture=capture)


def same_signature(op: str, shape: dict, dtype: str, device: str, seeds=(1, 2)):
    """Two input sets of one signature: the second's held arguments (a graph) are the first's."""
    spec = ops.OPS[op]
    a = spec.inputs(shape, seed=seeds[0], device=device, dtype=dtype)
    b = spec.inputs(shape, seed=seeds[1], device=device, dtype=dtype)
    hold = registered(op, dtype).hold
    return a, tuple(x if name in hold else y for name, x, y in zip(spec.args, a, b))


def check_registration(op: str) -> None:
    for dtype in ("fp32", "bf16"):
        i = registry.get(op, "triton_graphs", dtype)
        plain = registry.get(op, "triton", dtype)
        look, plain_look = facets.column(i.name), facets.column(plain.name)
        assert (i.family, look.label, look.order) == (plain.family, "Triton block + CUDA graphs", plain_look.order + 1)
        assert look.color and look.color != plain_look.color and i.needs_cuda and not i.interpret
        assert i.runs_on("cpu") and i.prepare is not None and i.fn is registered(op, dtype)
    assert registry.role("custom") == "triton"


def check_on_cpu(op: str, shape: dict, dtype: str) -> None:
    """The wrapper around the real block (under the interpreter, with CallAgain): bit for bit the plain
    call, a second set of the same signature its own answer, out= filled, one capture."""
    g = like(op, dtype, CallAgain())
    a, b = same_signature(op, shape, dtype, "cpu")
    ya = g(*a).clone()
    assert torch.equal(ya, g.fn(*a))
    assert torch.equal(g(*b), g.fn(*b))
    out = torch.full_like(ya, float("nan"))
    assert g(*a, out=out) is out and torch.equal(out, ya)
    assert g.capture.captures == 1 and len(g.cache) == 1


def check_on_gpu(op: str, dtype: str, shapes) -> None:
    """The registered column against the plain 'triton' column, bit for bit, at each shape; a second
    input set of the same signature; the float64 check of the harness."""
    graphs, plain = registry.get(op, "triton_graphs", dtype), registry.get(op, "triton", dtype)
    for shape in shapes:
        a, b = same_signature(op, shape, dtype, "cuda")
        a = graphs.prepare(*a)  # captures here, as the harness's prepare does
        before = registered(op, dtype).captures
        for args in (a, b, a):
            want = plain.fn(*(plain.prepare(*args) if plain.prepare else args))
            got = graphs.fn(*args)
            torch.cuda.synchronize()
            assert torch.equal(got, want), (shape, (got.double() - want.double()).abs().max().item())
        assert registered(op, dtype).captures == before, "the same signature captured again"
    failures = gpu_failures(graphs, shapes)
    assert not failures, failures[:5]


def check_launches(op: str, dtype: str, shape: dict) -> None:
    """One graph launch a call (host side); on the GPU the plain column's kernels, no more."""
    from mage.profile import profile
    graphs, plain = registry.get(op, "triton_graphs", dtype), registry.get(op, "triton", dtype)
    inputs = ops.OPS[op].inputs(shape, seed=0, device="cuda", dtype=dtype)
    args = graphs.prepare(*inputs)
    p = profile(lambda: graphs.fn(*args), iters=20)
    pargs = plain.prepare(*inputs) if plain.prepare else inputs
    q = profile(lambda: plain.fn(*pargs), iters=20)
    print(f"\n{op}/triton_graphs/{dtype}: host launches {sorted(set(p.per_iter_launches))}, "
          f"{p.launches:g} kernels a call (plain: {q.launches:g}), copies {p.copy_us:.2f} us")
    assert set(p.per_iter_launches) == {1}, p.per_iter_launches
    assert p.launches == q.launches, (p.kernel_names, q.kernel_names)


def block_graph_tests(op: str, small: dict, empty: dict, bad: tuple[str, Callable], gpu_shapes: list) -> dict:
    """The graphs tests of one block, as ``{name: test function}`` for the block's test file to put in its
    namespace (``globals().update(...)``) so pytest collects them there under these names.

    small: a CPU shape (interpreter-sized); empty: a shape with no output elements; bad: (an argument
    name, a function spoiling that argument's shape); gpu_shapes: GPU shapes beside the field ones."""
    spec = ops.OPS[op]
    bad_arg, spoil = bad
    at = spec.args.index(bad_arg)

    def test_registered_beside_the_triton_column():
        check_registration(op)

    @cpu_only
    @pytest.mark.parametrize("dtype", ["fp32", "bf16"])
    def test_graphed_block_is_the_plain_block_on_the_cpu(dtype):
        check_on_cpu(op, small, dtype)

    @cpu_only
    def test_an_empty_block_runs_plain():
        g = like(op, "fp32", CallAgain())
        inputs = spec.inputs(empty, seed=0)
        assert g(*inputs).numel() == 0 and g.capture.captures == 0

    @pytest.mark.parametrize("real", [False, True], ids=["spec", "device"])
    def test_bad_inputs_are_refused_before_any_capture(real):
        g = like(op, "fp32", None if real else CallAgain())
        inputs = spec.inputs(small, seed=0)
        with pytest.raises(MageInputError) as e:
            g(*inputs[:at], spoil(inputs[at]), *inputs[at + 1:])
        # the real capture refuses the CPU device first (the first argument); the spec names the bad one
        assert e.value.op == op and e.value.arg == (spec.args[0] if real else bad_arg), str(e.value)
        assert not g.cache and g.captures == 0

    @gpu
    @pytest.mark.parametrize("dtype", ["fp32", "bf16"])
    def test_gpu_graphed_equals_the_triton_column_bit_for_bit(dtype):
        check_on_gpu(op, dtype, spec.shapes["field"] + list(gpu_shapes))

    @gpu
    @pytest.mark.parametrize("dtype", ["fp32", "bf16"])
    def test_gpu_one_graph_launch_a_call(dtype):
        check_launches(op, dtype, spec.shapes["field"][0])

    return {name: fn for name, fn in locals().items() if name.startswith("test_")}
