"""The Rust kernels on a GPU: 30+ random shapes per op and launch path, determinism, one launch per call,
CUDA errors as Python exceptions, rust_native's raw spans, an int64 graph refused. The build and the
Python face without a GPU are tests/test_rust.py's."""
from __future__ import annotations

import random

import pytest
import torch

from mage import ops
from mage.check import check
from mage.errors import MageInputError
from mage.registry import get, impls
from mage.timing import SpanPlan

rust = pytest.importorskip("kernels._rust")
from kernels._rust.plan import plan_for  # noqa: E402
from tests.support.rust_build import build  # noqa: E402

built = pytest.fixture(build, scope="session", name="built")  # the build, once a session
GPU = torch.cuda.is_available()



# ---- on a GPU ------------------------------------------------------------------------------------
def random_shapes(op: str, count: int = 32, seed: int = 0) -> list[dict]:
    """Sizes that are multiples of nothing in particular, across both code paths of each kernel."""
    rng = random.Random(f"{op}-{seed}")
    r = rng.randint
    make = {
        "matmul": lambda: dict(M=r(1, 300), K=r(1, 300), N=r(1, 300)),
        "bias_gelu": lambda: dict(R=r(1, 700), C=r(1, 5000)),
        "layernorm": lambda: dict(R=r(1, 300), C=r(1, 9000)),
        "triangle": lambda: dict(N=r(1, 90), C=r(1, 40)),
        "neighbor_agg": lambda: dict(n=r(1, 4000), F=r(1, 150), deg=r(0, 24), dist=rng.choice(["uniform", "skewed"])),
    }[op]
    return [make() for _ in range(count)]


# The operations' Rust columns (the blocks' Rust columns have their own tests: several launches, cuBLAS inside)
RUST_IMPLS = [i for i in impls() if i.family == "rust" and i.fn is not None and ops.OPS[i.op].kind != "block"]
VARIANTS = [rust.variant(op, v) for op in ("matmul", "triangle")
            for v in range(len(__import__(f"kernels.{op}.rust_impl", fromlist=["VERSIONS"]).VERSIONS))]


def _id(i):
    return f"{i.op}-{i.name}"


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl", RUST_IMPLS + VARIANTS, ids=_id)
def test_random_and_awkward_shapes(built, impl):
    why = impl.runs_on("cuda")
    if why:
        pytest.skip(why)
    failures = []
    cases = [(s, "normal") for s in random_shapes(impl.op)] + [(s, d) for s in ops.OPS[impl.op].awkward
                                                              for d in ("normal", "heavy")]
    for k, (shape, dist) in enumerate(cases):
        res = check(impl, shape, trials=1, seed=k, dist=dist, device="cuda")
        if not res.passed:
            failures.append(f"{ops.shape_key(shape)} {dist}: {res.reason}")
    assert not failures, f"{len(failures)} of {len(cases)} failed:\n" + "\n".join(failures[:8])


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_neighbor_agg_is_deterministic_with_hubs(built):
    graph, x = ops.OPS["neighbor_agg"].inputs(dict(n=20000, F=64, deg=16, dist="skewed"), seed=5, device="cuda")
    assert plan_for(graph).parts > 0
    fn = get("neighbor_agg", "rust").fn
    first = fn(graph, x)
    for _ in range(5):
        assert torch.equal(fn(graph, x), first)
    py = get("neighbor_agg", "rust_ptx_py")
    if py.runs_on("cuda") is None:
        assert torch.equal(py.fn(graph, x), first)  # same PTX, same bits
    ref = ops.OPS["neighbor_agg"].reference(graph, x)
    assert float((first.double() - ref).norm() / ref.norm()) < ops.TOLERANCE["fp32"]


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl", RUST_IMPLS, ids=_id)
def test_one_launch_per_call(built, impl):
    from mage.profile import profile
    if impl.runs_on("cuda"):
        pytest.skip(impl.runs_on("cuda"))
    spec = ops.OPS[impl.op]
    shape = spec.shapes["field"][-1]
    inputs = spec.inputs(shape, device="cuda")
    args = impl.prepare(*inputs) if impl.prepare else inputs
    p = profile(lambda: impl.fn(*args), iters=10)
    assert p.launches == 1, f"{p.launches} launches per call: {p.kernel_names}"


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_cuda_errors_come_back_with_their_names(built):
    with pytest.raises(rust.RustKernelError, match="CUDA_ERROR_INVALID_VALUE.*cuLaunchKernel") as e:
        rust._call("mage_rust_bad_launch", 0, rust._stream(0))
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    A = torch.randn(8, 8, device="cuda")
    with pytest.raises(rust.RustKernelError, match="B is a null pointer"):
        rust.launch("matmul", 0, [A.data_ptr(), 0, A.data_ptr(), 8, 8, 8])
    # neither error left the context broken
    torch.testing.assert_close(get("matmul", "rust").fn(A, A), A @ A, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_rust_native_returns_raw_spans_of_the_plan(built, op):
    impl = get(op, "rust_native")
    if impl.runs_on("cuda"):
        pytest.skip(impl.runs_on("cuda"))
    plan = SpanPlan.make(n=30, rounds=3, block=4, warmup=2)
    shape = ops.OPS[op].shapes["field"][0]
    inputs = ops.OPS[op].inputs(shape, seed=1, device="cuda")
    got = impl.own_spans(inputs, shape, "field", plan, True)
    assert set(got) == {"spans_us", "host_us", "graph_us", "kernel_names"}
    assert [len(r) for r in got["spans_us"]] == [plan.per_round] * plan.rounds
    assert [len(r) for r in got["host_us"]] == [plan.per_round] * plan.rounds
    assert all(v > 0 for r in got["spans_us"] for v in r) and got["graph_us"] > 0
    assert got["kernel_names"] == impl.config["kernel"]
    assert impl.own_spans(inputs, shape, "field", plan, False)["graph_us"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_an_int64_graph_on_the_gpu_is_refused(built):
    graph, x = ops.OPS["neighbor_agg"].inputs(dict(n=500, F=8, deg=4), seed=2, device="cuda")
    forged = object.__new__(type(graph))
    for slot in type(graph).__slots__:
        object.__setattr__(forged, slot, getattr(graph, slot))
    object.__setattr__(forged, "col", graph.col.long())
    for name in ("rust", "rust_ptx_py"):
        impl = get("neighbor_agg", name)
        if impl.runs_on("cuda") is None:
            with pytest.raises(MageInputError):
                impl.fn(forged, x)
