"""The Triton column as a whole, looped over the registry: every op has one, awkward shapes, poisoned
outputs, config handling, devices the kernels cannot read; on a GPU, one launch per call, random and
large shapes, and the custom operators inside torch.compile. Op-specific tests live beside each kernel
(kernels/<op>/tests/test_<op>_triton.py)."""
from __future__ import annotations

import pytest
import torch

from kernels._triton import common
from tests.support.kernel_checks import cpu_only, gpu, module
from mage import ops
from mage.check import check
from mage.errors import MageInputError
from mage.registry import impls

# The operations' Triton columns, a model's part's included (one kernel like an operation's); a model
# block's custom column is tested in its own folder
KINDS = ("operation", "part")
TRITON = [i for i in impls(names=["triton"]) if ops.OPS[i.op].kind in KINDS]
CPU_IMPLS = [i for i in TRITON if i.interpret]


def _id(i):
    return f"{i.op}-{i.dtype}"


def _small(op):
    """The largest non-empty awkward shape of op that is cheap under the interpreter: the op's own
    awkward list, so no per-op table lives here."""
    spec = ops.OPS[op]
    return min((s for s in spec.awkward if all(v != 0 for v in s.values())),
               key=lambda s: -spec.cost(s)[1] if spec.cost(s)[1] < 2e6 else spec.cost(s)[1])


def test_every_op_has_a_triton_impl():
    assert {i.op for i in TRITON} == {k for k, s in ops.OPS.items() if s.kind in KINDS}
    assert {i.dtype for i in TRITON if i.op == "matmul"} == {"fp32", "fp32x3", "tf32", "bf16"}
    for i in TRITON:
        assert i.family == "triton" and i.needs_cuda and i.sweep and i.variant
        for shape_set in ("field", "large"):
            for shape in ops.OPS[i.op].shapes[shape_set]:
                assert set(i.config_at(shape)) == set(i.sweep[0]), (i.op, shape)


def test_sweeps_start_with_first_and_defaults_cover_shape_sets():
    for i in TRITON:
        if i.dtype == "fp32":
            assert i.sweep[0] == module(i.op).FIRST
        for shape_set in ("field", "large"):  # the config each listed shape runs names every tile choice
            for shape in ops.OPS[i.op].shapes[shape_set]:
                assert set(i.config_for(shape)) == set(i.sweep[0]), (i.op, i.dtype, shape_set)


@pytest.mark.parametrize("impl", TRITON, ids=_id)
def test_variant_records_its_config_and_refuses_unknown_keys(impl):
    first = impl.sweep[0]
    assert impl.variant(**first).config == first
    with pytest.raises(MageInputError, match="config") as e:
        impl.variant(BLOCK_Q=4)
    assert e.value.op == impl.op


# ---- CPU: the interpreter ------------------------------------------------------------------------
# Awkward shapes that take the interpreter many seconds a call, each with the fast-tier test that reaches
# the same road; they run in the full tier.
SLOW_UNDER_INTERPRETER = {
    ("layernorm", "R=5,C=8193"): "11 s a call; its chunked rows run in test_forced_chunked_paths (R=5, C=37)",
    ("triangle", "N=33,C=65"): "2.4 s a call; partial tiles and groups run in test_roads_at_awkward_shapes",
}


def _awkward_cases():
    for impl in CPU_IMPLS:
        for shape in ops.OPS[impl.op].awkward:
            slow = (impl.op, ops.shape_key(shape)) in SLOW_UNDER_INTERPRETER
            yield pytest.param(impl, shape, id=f"{_id(impl)}-{ops.shape_key(shape)}",
                               marks=[pytest.mark.slow] if slow else [])


@cpu_only
@pytest.mark.parametrize("impl, shape", list(_awkward_cases()))
def test_awkward_shapes(impl, shape):
    """check() poisons ``out`` with NaN, requires the result to be that buffer with every element written,
    and compares it with float64 (norm-wise); normal and heavy-tailed inputs, one fresh draw of each."""
    for dist in ("normal", "heavy"):
        r = check(impl, shape, trials=1, dist=dist, device="cpu")
        assert r.passed, f"{impl.op} {shape} {dist}: {r.reason}"


def _tensor_args(op, inputs):
    """(argument name, tensor) pairs of one input set, a graph's tensors under their own names."""
    for name, value in zip(ops.OPS[op].args, inputs):
        if isinstance(value, torch.Tensor):
            yield name, value


@pytest.mark.parametrize("impl", [i for i in TRITON if i.dtype == "fp32"], ids=_id)
def test_tensors_the_kernel_cannot_read_are_refused_before_launch(impl, monkeypatch):
    # Without the interpreter a compiled kernel reads CUDA memory only: CPU tensors must be refused
    # with the op and argument named, not Triton's "Pointer argument (at 0) cannot be accessed".
    spec = ops.OPS[impl.op]
    inputs = spec.inputs(_small(impl.op), device="cpu")
    args = impl.prepare(*inputs) if impl.prepare else inputs
    monkeypatch.setattr(common, "interpreting", lambda: False)
    with pytest.raises(MageInputError) as e:
        impl.fn(*args)
    first = "rowptr" if impl.op == "neighbor_agg" else spec.args[0]
    assert (e.value.op, e.value.arg) == (impl.op, first) and "cpu" in str(e.value)
    monkeypatch.undo()
    # a 'meta' tensor has no memory to read, interpreter or not
    if impl.op != "neighbor_agg":
        meta = tuple(t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs)  # an int stays
        with pytest.raises(MageInputError) as e:
            impl.fn(*meta)
        assert (e.value.op, e.value.arg) == (impl.op, spec.args[0]) and "meta" in str(e.value)


def test_offsets_64_from_shapes_and_strides_only():
    assert not common.offsets_64(torch.empty(46340, 46340, device="meta"))
    assert common.offsets_64(torch.empty(46341, 46341, device="meta"))
    assert common.offsets_64(torch.empty(2, 2**31, device="meta")[:, ::2])  # the last element's offset counts
    assert not common.offsets_64(torch.empty(0, 2**33, device="meta"))  # empty: nothing is read


# ---- GPU -------------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("impl", TRITON, ids=_id)
def test_gpu_one_launch_per_call(impl):
    from mage.profile import profile
    spec = ops.OPS[impl.op]
    for shape in spec.shapes["field"]:
        inputs = spec.inputs(shape, device="cuda", dtype=impl.dtype)
        args = impl.prepare(*inputs) if impl.prepare else inputs
        p = profile(lambda: impl.fn(*args), iters=5, warmup=2)
        # one launch, unless the op's module says how many a config makes (layout copies, a block)
        want = getattr(module(impl.op), "launches", lambda cfg: 1)(impl.config_at(shape))
        assert p.launches == want, (shape, impl.config_at(shape), p.kernel_names)


@gpu
def test_gpu_custom_op_inside_torch_compile():
    x, b = ops.OPS["bias_gelu"].inputs(dict(R=64, C=300), device="cuda")
    A, B = ops.OPS["matmul"].inputs(dict(M=64, K=300, N=32), device="cuda")

    def f(x, b, B):
        return torch.ops.mage.triton_matmul(torch.ops.mage.triton_bias_gelu(x, b), B, "fp32") + 1.0

    got = torch.compile(f, fullgraph=True)(x, b, B)
    want = torch.nn.functional.gelu(x + b).double() @ B.double() + 1.0
    assert float((got.double() - want).norm() / want.norm()) < 1e-5


# slowest last: a hundred-odd checks, some at the large shapes
@gpu
@pytest.mark.parametrize("impl", TRITON, ids=_id)
def test_gpu_random_and_large_shapes(impl):
    spec = ops.OPS[impl.op]
    shapes = spec.random_shapes(30) + spec.awkward + spec.shapes["field"] + spec.shapes["large"]
    bad = [(s, r.reason) for s in shapes for r in [check(impl, s, trials=1, device="cuda")] if not r.passed]
    assert not bad, bad[:5]


def test_the_launcher_and_the_recorded_config_choose_the_same_entry():
    # The neighbour launcher chooses its config from (n, F); the harness records config_for(whole shape).
    # Where they chose differently, rows would name tiles that did not run.
    from kernels.neighbor_agg.triton_kernel import TILES
    from mage import ops, registry
    for dtype, table in TILES.items():
        impl = registry.get("neighbor_agg", "triton", dtype)
        for whole in [s for shapes in ops.OPS["neighbor_agg"].shapes.values() for s in shapes]:
            assert table.choose(dict(n=whole["n"], F=whole["F"])) == impl.config_at(whole), (dtype, whole)
