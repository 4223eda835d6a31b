"""triangle's backward (kernels/triangle/triton_backward.py): gradients of the Triton operator against
float64 autograd of the spec's reference, every buffer PyTorch allocates poisoned with NaN first, at
awkward, random, strided and heavy-tailed inputs, on every road (the swapped views the backward passes
must read correctly in place and through the channel-major copies); opcheck, torch.compile, the
training paths; on a GPU both precisions at 30+ random shapes, bitwise determinism over 10 runs and
Inductor's compiled backward."""
from __future__ import annotations

import random

import pytest
import torch

from kernels._triton import TileTable
from tests.support import kernel_checks as testing
from tests.support.kernel_checks import assert_refuses, cpu_only, gpu, impl, module, rel_err, spec
from kernels.triangle import triton_backward as bwd
from mage import registry
from mage.ext.training import paths
from mage.ops import randn

OP = "triangle"
DTYPES = ("fp32", "fp32x3")


def _cfg(layout, store="direct", k_inner=True, **tiles):
    base = dict(LAYOUT=layout, STORE=store, K_INNER=k_inner, BLOCK_I=16, BLOCK_J=16, BLOCK_K=16, BLOCK_C=1,
                GROUP_I=2, PER_CHANNEL=False)
    return {**base, **tiles}


# every road and epilogue, with tiles small enough for the interpreter
ROADS = {
    "in_place": _cfg("in_place", BLOCK_C=2),
    "in_place_per_channel": _cfg("in_place", BLOCK_C=4, PER_CHANNEL=True),
    "permute_k_inner": _cfg("channel_major", "permute"),
    "permute_ij_inner": _cfg("channel_major", "permute", k_inner=False),
    "direct_4_channels": _cfg("channel_major", "direct", k_inner=False, BLOCK_C=4),
}


def force_road(monkeypatch, config):
    """Every call of the operator, forward and backward, at every shape, runs ``config``."""
    for dtype in list(module(OP).TILES):
        # a new table, so the launcher's plan memo (keyed by the table) cannot answer from the old
        monkeypatch.setitem(module(OP).TILES, dtype, TileTable(OP, {"forced": dict(config)}, base="forced"))


def reference_grads(A, B, dO):
    return testing.pair_reference_grads(OP, A, B, dO)


def triton_grads(A, B, dO, dtype):
    """(dA, dB) through the column's registered training path."""
    return testing.pair_triton_grads(OP, A, B, dO, dtype)


def inputs(shape, dist="normal", seed=0, device="cpu"):
    A, B = spec(OP).inputs(shape, seed=seed, device=device, dist=dist)
    dO = randn(A.shape, torch.Generator(device=device).manual_seed(seed + 1), device, dist)
    return A, B, dO


def assert_close_grads(A, B, dO, dtype, what=""):
    testing.assert_pair_grads_close(OP, A, B, dO, dtype, torch.float32, what)


def small_random_shapes(n, seed=0):
    rnd = random.Random(f"triangle-backward-{seed}")
    return [dict(N=rnd.randint(1, 24), C=rnd.randint(1, 12)) for _ in range(n)]


def test_reference_gradcheck():
    testing.check_reference_gradcheck(OP, dict(N=4, C=3))


def test_the_fp32_precisions_have_training_paths_and_bf16_none():
    testing.check_every_precision_trains(OP, DTYPES)
    # bf16 is a forward column, as the other operations' bf16 columns are: no Triton training path, so
    # the harness times no Triton bf16 backward (eager PyTorch's, autograd's own, it does)
    assert paths.train_fn(impl(OP, "bf16")) is None
    assert paths.train_fn(registry.get(OP, "pytorch", "bf16")) is not None


@cpu_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_at_awkward_and_random_shapes(poisoned, dtype):
    # the chosen configs (shapes outside the field and large sets take the 'sweep' entry, whose 128-wide
    # tiles the interpreter runs slowly: the widest awkward shape is left to the small-tile roads below)
    shapes = [s for s in spec(OP).awkward if s["C"] <= 33] + small_random_shapes(3)
    for seed, shape in enumerate(shapes):
        dist = ("normal", "heavy")[seed % 2]
        assert_close_grads(*inputs(shape, dist, seed), dtype, f"{shape} {dist}")


@cpu_only
@pytest.mark.parametrize("road", sorted(ROADS))
def test_every_road_reads_the_swapped_views(poisoned, monkeypatch, road):
    force_road(monkeypatch, ROADS[road])
    for seed, (shape, dtype) in enumerate(zip((dict(N=33, C=5), dict(N=5, C=9), dict(N=1, C=3)), DTYPES * 2)):
        assert_close_grads(*inputs(shape, "heavy", seed), dtype, f"{road} {shape}")


@cpu_only
def test_strided_inputs_and_gradients(poisoned):
    # channels not innermost, every other channel, and the stride-0 gradient that .sum() sends back
    A, B, dO = inputs(dict(N=11, C=6), "heavy")
    Ap = A.permute(0, 2, 1).contiguous().permute(0, 2, 1)
    Bs = torch.cat([B, B], dim=2)[:, :, ::2]
    assert_close_grads(Ap, Bs, dO, "fp32", "strided inputs")
    assert_close_grads(A, B, torch.ones(()).expand(11, 11, 6), "fp32x3", "expanded dO")


@cpu_only
@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_only_the_gradients_asked_for(needs, monkeypatch):
    A, B, dO = inputs(dict(N=6, C=3))
    A, B = A.requires_grad_(needs[0]), B.requires_grad_(needs[1])
    calls = []
    for name in ("grad_a", "grad_b"):
        monkeypatch.setattr(bwd, name, (lambda f, n: lambda *a: calls.append(n) or f(*a))(getattr(bwd, name), name))
    (paths.train_fn(impl(OP, "fp32"))(A, B) * dO).sum().backward()
    assert calls == [name for name, need in zip(("grad_a", "grad_b"), needs) if need]
    assert (A.grad is None) != needs[0] and (B.grad is None) != needs[1]


class _Recorder:
    """Stands in for a kernel: records each launch's arguments, launches nothing."""

    def __init__(self, launches):
        self.launches = launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(dict(kwargs, args=args))


@pytest.mark.parametrize("road", ["in_place", "permute_k_inner"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_launch_at_the_forwards_precision(dtype, road, monkeypatch):
    # every GEMM launch of the backward carries the forward's input precision (the interpreter multiplies
    # in FP32 whatever it is told, so only this sees a slip); the in-place road reads the swapped views
    from kernels._triton import common
    launches = []
    for name in ("_triangle_kernel",):
        monkeypatch.setattr(module(OP), name, _Recorder(launches))
    for name in ("_batched_gemm_kernel", "_transpose_kernel"):
        monkeypatch.setattr(module(OP).road, name, _Recorder(launches))
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # records only: runs without a GPU
    force_road(monkeypatch, ROADS[road])
    A, B, dO = inputs(dict(N=6, C=3))
    torch.autograd.grad(paths.train_fn(impl(OP, dtype))(A.requires_grad_(), B.requires_grad_()), (A, B), dO)
    gemms = [L for L in launches if "PRECISION" in L]
    assert len(gemms) == 3 and {L["PRECISION"] for L in gemms} == {module(OP).INPUT_PRECISION[dtype]}
    if road == "in_place":  # arguments: X, Y, O, N, C, then the strides of X, Y and O over (p, r, c)
        (_, grad_a, grad_b), ij, ji = gemms, (18, 3, 1), (3, 18, 1)
        assert grad_a["args"][5:11] == ij + ji and grad_b["args"][5:11] == ji + ji


@cpu_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck(dtype):
    A, B, _ = inputs(dict(N=5, C=3))
    torch.library.opcheck(torch.ops.mage.triton_triangle.default, (A.requires_grad_(), B.requires_grad_(), dtype))


@cpu_only
def test_inside_torch_compile(poisoned):
    A, B, dO = inputs(dict(N=9, C=4), "heavy")
    train = paths.train_fn(impl(OP, "fp32x3"))
    step = torch.compile(lambda a, b: (train(a, b) * dO).sum(), backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(step(*(t.requires_grad_() for t in (A, B))), (A, B))
    assert all(torch.equal(g, w) for g, w in zip(got, triton_grads(A, B, dO, "fp32x3")))


@cpu_only
def test_bad_inputs_name_op_and_argument():
    A, B, _ = inputs(dict(N=4, C=2))
    train = paths.train_fn(impl(OP, "fp32"))
    assert_refuses(train, OP, "B", A.requires_grad_(), torch.randn(4, 4, 3))
    assert_refuses(train, OP, "A", A.double(), B)


# ---- GPU ----------------------------------------------------------------------------------------------
GPU_SHAPES = (spec(OP).random_shapes(32, seed=16) + spec(OP).awkward + spec(OP).shapes["field"]
              + spec(OP).shapes["large"] + [dict(N=383, C=127)])


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_gradients_at_random_shapes(poisoned, dtype):
    for seed, shape in enumerate(GPU_SHAPES):
        dist = ("normal", "heavy")[seed % 2]
        assert_close_grads(*inputs(shape, dist, seed, "cuda"), dtype, f"{shape} {dist}")


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("road", ["in_place", "permute", "direct"])
def test_gpu_every_road_at_random_shapes(poisoned, monkeypatch, dtype, road):
    # the GPU sweep's own tiles for each road, as the backward's swapped views meet them
    pick = {"in_place": lambda c: c["LAYOUT"] == "in_place", "permute": lambda c: c["STORE"] == "permute",
            "direct": lambda c: c["LAYOUT"] == "channel_major" and c["STORE"] == "direct"}[road]
    force_road(monkeypatch, next(c for c in module(OP).TILES[dtype].sweep_configs() if pick(c)))
    for seed, shape in enumerate(spec(OP).random_shapes(10, seed=road) + [dict(N=384, C=128)]):
        assert_close_grads(*inputs(shape, "heavy", seed, "cuda"), dtype, f"{road} {shape}")


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_bitwise_deterministic_over_10_runs(dtype):
    for shape in spec(OP).shapes["field"] + spec(OP).shapes["large"] + [dict(N=201, C=37)]:
        A, B, dO = inputs(shape, "heavy", 5, "cuda")
        first = triton_grads(A, B, dO, dtype)
        for run in range(9):
            again = triton_grads(A, B, dO, dtype)
            assert all(torch.equal(a, f) for a, f in zip(again, first)), f"{dtype} {shape}: run {run + 2} differs"


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_inductor_backward(dtype):
    # Inductor compiles the graphs around the opaque operator; checked against float64
    A, B, dO = inputs(dict(N=130, C=33), "heavy", 7, "cuda")
    train = paths.train_fn(impl(OP, dtype))
    step = torch.compile(lambda a, b: (train(a, b) * dO).sum(), fullgraph=True)
    got = torch.autograd.grad(step(*(t.requires_grad_() for t in (A, B))), (A, B))
    for name, g, w in zip(("dA", "dB"), got, reference_grads(A, B, dO)):
        assert rel_err(g, w) <= spec(OP).tol(dtype), (dtype, name, rel_err(g, w))
