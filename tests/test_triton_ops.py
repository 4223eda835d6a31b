"""The Triton kernels: on the CPU under TRITON_INTERPRET=1 (small awkward shapes, every tile config,
bad inputs), and on a GPU (random and large shapes, determinism, launches, torch.compile)."""
from __future__ import annotations

import math
import os
import random

import pytest
import torch

from mage import ops
from mage.check import check
from mage.errors import MageInputError
from mage.registry import impls

triton_ops = pytest.importorskip("kernels.triton_ops")

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cuda" if torch.cuda.is_available() else "cpu"
cpu_only = pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1")
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TRITON = [i for i in impls(names=["triton"])]
CPU_IMPLS = [i for i in TRITON if i.interpret]


def _id(i):
    return f"{i.op}-{i.dtype}"


def test_every_op_has_a_triton_impl():
    assert {i.op for i in TRITON} == set(ops.OPS)
    assert {i.dtype for i in TRITON if i.op == "matmul"} == {"fp32", "tf32", "bf16"}
    for i in TRITON:
        assert i.family == "triton" and i.needs_cuda and i.config


# ---- CPU: the interpreter ------------------------------------------------------------------------
@cpu_only
@pytest.mark.parametrize("impl", CPU_IMPLS, ids=_id)
def test_awkward_shapes(impl):
    for shape in ops.OPS[impl.op].awkward:
        for dist in ("normal", "heavy"):
            r = check(impl, shape, trials=2, dist=dist, device="cpu")
            assert r.passed, f"{impl.op} {shape} {dist}: {r.reason}"


# one small awkward shape per op for the whole sweep (the interpreter's cost grows with tile size)
SMALL = {"matmul": dict(M=67, K=45, N=33), "bias_gelu": dict(R=37, C=129), "layernorm": dict(R=9, C=1000),
         "triangle": dict(N=17, C=9), "neighbor_agg": dict(n=37, F=33, deg=3, dist="skewed")}


@cpu_only
@pytest.mark.parametrize("op", list(ops.OPS))
def test_every_sweep_config(op):
    for cfg in triton_ops.sweep_configs(op):
        r = check(triton_ops.variant(op, **cfg), SMALL[op], trials=1, device="cpu")
        assert r.passed, f"{op} {cfg}: {r.reason}"


@cpu_only
@pytest.mark.parametrize("op, config, shape", [
    ("layernorm", dict(MAX_BLOCK_C=16, BLOCK_R=2), dict(R=5, C=37)),  # chunked path, Chan merges
    ("layernorm", dict(MAX_BLOCK_C=256, BLOCK_R=1), dict(R=3, C=8193)),  # many chunks
    ("neighbor_agg", dict(SPLIT=2, BLOCK_E=2), dict(n=37, F=33, deg=3, dist="skewed")),  # many hubs
    ("neighbor_agg", dict(SPLIT=1, MAX_BLOCK_F=16), dict(n=20, F=40, deg=4, dist="uniform")),  # F blocks
    ("triangle", dict(BLOCK_C=1, BLOCK_I=16, BLOCK_J=16, BLOCK_K=16), dict(N=33, C=5)),
    ("matmul", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=3), dict(M=100, K=70, N=50)),
])
def test_forced_paths(op, config, shape):
    r = check(triton_ops.variant(op, **config), shape, trials=2, dist="heavy", device="cpu")
    assert r.passed, r.reason


@cpu_only
def test_layernorm_large_offset():
    # |mean| >> std is where a one-pass sum of squares would cancel; both paths must stay accurate
    x = torch.randn(4, 3000, generator=torch.Generator().manual_seed(1)) + 1e3  # sum of x^2 would lose ~6%
    g, b = torch.ones(3000), torch.zeros(3000)
    ref = ops.layernorm_reference(x, g, b)
    for cfg in (dict(MAX_BLOCK_C=4096), dict(MAX_BLOCK_C=512)):
        y = triton_ops.layernorm.layernorm(x, g, b, **cfg)
        assert float((y.double() - ref).norm() / ref.norm()) < 1e-3, cfg


@cpu_only
def test_neighbor_agg_hub_counters_reset():
    # one hub with 50 edges cut into chunks of 8: a second call must find the counters at zero
    n, F = 6, 5
    deg = torch.tensor([0, 50, 1, 0, 3, 0])
    rowptr = torch.zeros(n + 1, dtype=torch.int32)
    rowptr[1:] = torch.cumsum(deg, 0)
    g = torch.Generator().manual_seed(3)
    col = torch.sort(torch.randint(0, n, (int(deg.sum()),), generator=g)).values.to(torch.int32)
    graph = ops.CSRGraph.build(rowptr, col, torch.rand(int(deg.sum()), generator=g))
    x = torch.randn(n, F, generator=g)
    ref = ops.neighbor_agg_reference(graph, x)
    for _ in range(3):
        y = triton_ops.neighbor_agg.neighbor_agg(graph, x, SPLIT=8, BLOCK_E=4)
        assert torch.allclose(y.double(), ref, atol=1e-5)


@cpu_only
@pytest.mark.parametrize("impl", CPU_IMPLS, ids=_id)
def test_poisoned_out_fully_written(impl):
    spec = ops.OPS[impl.op]
    shape = SMALL[impl.op]
    inputs = spec.inputs(shape, seed=5, device="cpu", dtype=impl.dtype)
    args = impl.prepare(*inputs) if impl.prepare else inputs
    out = spec.empty_out(*inputs).fill_(math.nan)
    got = impl.fn(*args, out=out)
    assert got is out and not torch.isnan(out).any()


BAD = {
    "matmul": [((torch.ones(3, 4), torch.ones(5, 2)), "B"), ((torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 2)), "A"),
               ((torch.ones(3), torch.ones(3, 2)), "A")],
    "bias_gelu": [((torch.ones(3, 4), torch.ones(5)), "b"), ((torch.ones(3, 4, dtype=torch.int32), torch.ones(4)), "x")],
    "layernorm": [((torch.ones(3, 4), torch.ones(4), torch.ones(5)), "beta"), ((torch.ones(3, 4), torch.ones(3), torch.ones(4)), "gamma")],
    "triangle": [((torch.ones(3, 4, 2), torch.ones(3, 4, 2)), "A"), ((torch.ones(3, 3, 2), torch.ones(3, 3, 1)), "B")],
    "neighbor_agg": [(("not a graph", torch.ones(3, 2)), "graph")],
}


@pytest.mark.parametrize("op", list(ops.OPS))
def test_bad_inputs_name_op_and_argument(op):
    fn = getattr(triton_ops.MODULES[op], op)
    for inputs, arg in BAD[op]:
        with pytest.raises(MageInputError) as e:
            fn(*inputs)
        assert e.value.op == op and e.value.arg == arg, str(e.value)
    inputs = ops.OPS[op].inputs(SMALL[op])
    with pytest.raises(MageInputError, match="out"):
        fn(*inputs, out=torch.empty(1, 1))
    with pytest.raises(MageInputError, match="config"):
        triton_ops.variant(op, BLOCK_Q=4)


def test_triangle_per_channel_needs_2_or_4_channels():
    A, B = ops.OPS["triangle"].inputs(dict(N=4, C=8))
    with pytest.raises(MageInputError, match="PER_CHANNEL"):
        triton_ops.triangle.triangle(A, B, PER_CHANNEL=True, BLOCK_C=8)


def test_reuse_counts():
    r = triton_ops.reuse("matmul", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16))
    assert (r["loads"], r["fmas"], r["fmas_per_load"]) == (512, 4096, 8.0)
    big = triton_ops.reuse("matmul", dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32))
    assert big["fmas_per_load"] == 64.0
    assert triton_ops.reuse("triangle", dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=8))["fmas_per_load"] == 32.0


def test_sweeps_start_with_first_and_defaults_cover_shape_sets():
    for op, mod in triton_ops.MODULES.items():
        assert triton_ops.sweep_configs(op)[0] == mod.FIRST
        for shape_set in ("field", "large", "sweep"):
            assert set(triton_ops.default_config(op, shape_set)) == set(mod.FIRST)


@cpu_only
def test_custom_ops_run_eagerly():
    A, B = ops.OPS["matmul"].inputs(dict(M=9, K=20, N=7))
    assert torch.allclose(torch.ops.mage.triton_matmul(A, B, "fp32"), A @ B, atol=1e-5)
    x, b = ops.OPS["bias_gelu"].inputs(dict(R=3, C=10))
    assert torch.allclose(torch.ops.mage.triton_bias_gelu(x, b), torch.nn.functional.gelu(x + b), atol=1e-6)
    graph, x = ops.OPS["neighbor_agg"].inputs(dict(n=30, F=6, deg=4, dist="skewed"))
    y = torch.ops.mage.triton_neighbor_agg(graph.rowptr, graph.col, graph.w, x)
    assert torch.allclose(y.double(), ops.neighbor_agg_reference(graph, x), atol=1e-5)


# ---- GPU -------------------------------------------------------------------------------------------
def _random_shapes(op, k, seed=0):
    rnd = random.Random(seed)
    s = []
    for _ in range(k):
        if op == "matmul":
            s.append(dict(M=rnd.randint(1, 1500), K=rnd.randint(1, 1500), N=rnd.randint(1, 1500)))
        elif op == "bias_gelu":
            s.append(dict(R=rnd.randint(1, 3000), C=rnd.randint(1, 9000)))
        elif op == "layernorm":
            s.append(dict(R=rnd.randint(1, 3000), C=rnd.choice([rnd.randint(1, 9000), rnd.randint(8193, 20000)])))
        elif op == "triangle":
            s.append(dict(N=rnd.randint(1, 200), C=rnd.randint(1, 150)))
        else:
            s.append(dict(n=rnd.randint(1, 60000), F=rnd.randint(1, 200), deg=rnd.randint(0, 40),
                          dist=rnd.choice(["uniform", "skewed"])))
    return s


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape_set", ["field", "large"])
def test_gpu_neighbor_agg_bitwise_deterministic(shape_set):
    impl = [i for i in TRITON if i.op == "neighbor_agg"][0]
    for shape in ops.OPS["neighbor_agg"].shapes[shape_set]:
        args = impl.prepare(*ops.OPS["neighbor_agg"].inputs(shape, device="cuda"))
        first = impl.fn(*args)
        for _ in range(9):
            assert torch.equal(impl.fn(*args), first), shape


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl", TRITON, ids=_id)
def test_gpu_one_launch_per_call(impl):
    from mage.profile import profile
    spec = ops.OPS[impl.op]
    for shape in spec.shapes["field"]:
        inputs = spec.inputs(shape, device="cuda", dtype=impl.dtype)
        args = impl.prepare(*inputs) if impl.prepare else inputs
        p = profile(lambda: impl.fn(*args), iters=5, warmup=2)
        assert p.launches == 1, (shape, p.kernel_names)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_custom_op_inside_torch_compile():
    x, b = ops.OPS["bias_gelu"].inputs(dict(R=64, C=300), device="cuda")
    A, B = ops.OPS["matmul"].inputs(dict(M=64, K=300, N=32), device="cuda")

    def f(x, b, B):
        return torch.ops.mage.triton_matmul(torch.ops.mage.triton_bias_gelu(x, b), B, "fp32") + 1.0

    got = torch.compile(f, fullgraph=True)(x, b, B)
    want = torch.nn.functional.gelu(x + b).double() @ B.double() + 1.0
    assert float((got.double() - want).norm() / want.norm()) < 1e-5


# slowest last: a hundred-odd checks, some at the large shapes
@pytest.mark.parametrize("impl", TRITON, ids=_id)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_random_and_large_shapes(impl):
    spec = ops.OPS[impl.op]
    shapes = _random_shapes(impl.op, 30) + spec.awkward + spec.shapes["field"] + spec.shapes["large"]
    bad = [(s, r.reason) for s in shapes for r in [check(impl, s, trials=1, device="cuda")] if not r.passed]
    assert not bad, bad[:5]
