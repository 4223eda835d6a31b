"""matmul's backward (kernels/matmul/triton_backward.py): gradients of the Triton operator against float64
autograd of the spec's reference, every buffer PyTorch allocates poisoned with NaN first, at awkward,
random, strided and heavy-tailed inputs; the operator's registration (opcheck), torch.compile, the
training paths; on a GPU every precision at 30+ random shapes, bitwise determinism over 10 runs and
Inductor's compiled backward."""
from __future__ import annotations

import random

import pytest
import torch

from tests.support import kernel_checks as testing
from tests.support.kernel_checks import assert_refuses, cpu_only, gpu, impl, rel_err, spec
from kernels.matmul import triton_backward as bwd
from mage.ext.training import paths
from mage.ops import randn

OP = "matmul"
CPU_DTYPES = ("fp32", "fp32x3", "tf32")  # the interpreter multiplies bf16 wrongly: bf16 on the GPU only


def reference_grads(A, B, dC):
    """(dA, dB) by float64 autograd through the spec's reference."""
    return testing.pair_reference_grads(OP, A, B, dC)


def triton_grads(A, B, dC, dtype):
    """(dA, dB) through the column's registered training path."""
    return testing.pair_triton_grads(OP, A, B, dC, dtype)


def inputs(shape, dtype, dist="normal", seed=0, device="cpu"):
    A, B = spec(OP).inputs(shape, seed=seed, device=device, dtype=dtype, dist=dist)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    dC = randn((shape["M"], shape["N"]), gen, device, dist).to(A.dtype)
    return A, B, dC


def assert_close_grads(A, B, dC, dtype, what=""):
    testing.assert_pair_grads_close(OP, A, B, dC, dtype, A.dtype, what)  # bf16 inputs get bf16 gradients


def small_random_shapes(n, seed=0):
    rnd = random.Random(f"matmul-backward-{seed}")
    return [dict(M=rnd.randint(1, 70), K=rnd.randint(1, 70), N=rnd.randint(1, 70)) for _ in range(n)]


def test_reference_gradcheck():
    testing.check_reference_gradcheck(OP, dict(M=5, K=7, N=3))


def test_every_precision_has_a_training_path():
    testing.check_every_precision_trains(OP)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_gradients_at_awkward_and_random_shapes(poisoned, dtype, dist):
    for seed, shape in enumerate(spec(OP).awkward + small_random_shapes(4)):
        assert_close_grads(*inputs(shape, dtype, dist, seed), dtype, f"{shape} {dist}")


@cpu_only
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_both_operand_layouts_give_the_same_gradients(poisoned, dtype):
    # the copy before each gradient is a layout choice only: the same sums in the same order
    A, B, dC = inputs(dict(M=19, K=23, N=17), dtype, "heavy")
    for copy in (False, True):
        assert torch.equal(bwd.grad_a(dC, B, dtype, copy), bwd.grad_a(dC, B, dtype, not copy))
        assert torch.equal(bwd.grad_b(A, dC, dtype, copy), bwd.grad_b(A, dC, dtype, not copy))


@cpu_only
def test_strided_inputs_and_gradients(poisoned):
    # transposed and sliced forward inputs, and the stride-0 gradient that .sum() sends back
    A, B, dC = inputs(dict(M=21, K=18, N=13), "fp32", "heavy")
    At = A.t().contiguous().t()
    Bs = torch.cat([B, B], dim=1)[:, ::2]
    assert_close_grads(At, Bs, dC, "fp32", "strided inputs")
    assert_close_grads(A, B, torch.ones(()).expand(21, 13), "fp32", "expanded dC")


@cpu_only
@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_only_the_gradients_asked_for(needs, monkeypatch):
    A, B, dC = inputs(dict(M=9, K=6, N=5), "fp32")
    A, B = A.requires_grad_(needs[0]), B.requires_grad_(needs[1])
    calls = []
    for name in ("grad_a", "grad_b"):
        monkeypatch.setattr(bwd, name, (lambda f, n: lambda *a: calls.append(n) or f(*a))(getattr(bwd, name), name))
    (paths.train_fn(impl(OP, "fp32"))(A, B) * dC).sum().backward()
    assert calls == [name for name, need in zip(("grad_a", "grad_b"), needs) if need]
    assert (A.grad is None) != needs[0] and (B.grad is None) != needs[1]


class _Recorder:
    """Stands in for the compiled kernel: records each launch's arguments, launches nothing."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(dict(kwargs, args=args))


@pytest.mark.parametrize("dtype", ["fp32", "fp32x3", "tf32", "bf16"])
def test_gradients_launch_at_the_forwards_precision_and_chosen_layouts(dtype, monkeypatch):
    # The backward's two launches carry the forward's input precision (a TF32 slip in a gradient would
    # pass the interpreter, which multiplies in FP32), and each reads its transposed operand as COPY says.
    from kernels._triton import common
    rec = _Recorder()
    monkeypatch.setattr(bwd.triton_kernel, "_matmul_kernel", rec)
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # records only: runs without a GPU
    A, B, dC = inputs(dict(M=48, K=40, N=24), dtype)
    torch.autograd.grad(paths.train_fn(impl(OP, dtype))(A.requires_grad_(), B.requires_grad_()), (A, B), dC)
    forward, grad_a, grad_b = rec.launches
    assert {L["PRECISION"] for L in rec.launches} == {bwd.triton_kernel.PRECISION[dtype]}
    # kernel arguments: A, B, C, M, N, K, then the strides of A (m, k), B (k, n), C (m, n)
    assert grad_a["args"][3:6] == (48, 40, 24) and grad_b["args"][3:6] == (40, 24, 48)
    b_of_da = grad_a["args"][8:10]  # B^T as read: N-major (stride 1 along n) if copied, else K-major
    assert b_of_da == ((40, 1) if bwd.COPY[dtype]["dA"] else (1, 24)), b_of_da
    a_of_db = grad_b["args"][6:8]  # A^T as read: K-major (stride 1 along its k, which is M) if copied
    assert a_of_db == ((48, 1) if bwd.COPY[dtype]["dB"] else (1, 40)), a_of_db


@cpu_only
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_opcheck(dtype):
    A, B, _ = inputs(dict(M=7, K=5, N=6), dtype)
    torch.library.opcheck(torch.ops.mage.triton_matmul.default,
                          (A.requires_grad_(), B.requires_grad_(), dtype))


@cpu_only
def test_inside_torch_compile(poisoned):
    # aot_eager traces forward and backward as torch.compile does, without generating code
    A, B, dC = inputs(dict(M=13, K=9, N=11), "fp32x3", "heavy")
    train = paths.train_fn(impl(OP, "fp32x3"))
    step = torch.compile(lambda a, b: (train(a, b) * dC).sum(), backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(step(*(t.requires_grad_() for t in (A, B))), (A, B))
    want = triton_grads(A, B, dC, "fp32x3")
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@cpu_only
def test_bad_inputs_name_op_and_argument():
    A, B, _ = inputs(dict(M=4, K=3, N=2), "fp32")
    train = paths.train_fn(impl(OP, "fp32"))
    assert_refuses(train, OP, "B", A.requires_grad_(), torch.randn(4, 2))
    assert_refuses(train, OP, "A", A.double(), B)


# ---- GPU ----------------------------------------------------------------------------------------------
GPU_SHAPES = spec(OP).random_shapes(32, seed=16) + spec(OP).awkward + [dict(M=1024, K=1024, N=1024)]


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp32x3", "tf32", "bf16"])
def test_gpu_gradients_at_random_shapes(poisoned, dtype):
    for seed, shape in enumerate(GPU_SHAPES):
        dist = ("normal", "heavy")[seed % 2]
        assert_close_grads(*inputs(shape, dtype, dist, seed, "cuda"), dtype, f"{shape} {dist}")


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp32x3", "tf32", "bf16"])
def test_gpu_fp32_class_gradients_at_long_reductions(poisoned, dtype):
    # the reductions of dA (over N) and dB (over M) as long as the forward's K = 4096 check: a TF32 slip
    # in an fp32 or fp32x3 gradient exceeds the FP32 tolerance here
    for shape in (dict(M=4096, K=256, N=256), dict(M=256, K=256, N=4096)):
        assert_close_grads(*inputs(shape, dtype, "heavy", 3, "cuda"), dtype, str(shape))


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp32x3", "tf32", "bf16"])
def test_gpu_bitwise_deterministic_over_10_runs(dtype):
    for shape in (dict(M=1024, K=1024, N=1024), dict(M=1000, K=777, N=1500), dict(M=4096, K=4096, N=4096)):
        A, B, dC = inputs(shape, dtype, "heavy", 5, "cuda")
        first = triton_grads(A, B, dC, dtype)
        for run in range(9):
            again = triton_grads(A, B, dC, dtype)
            assert all(torch.equal(a, f) for a, f in zip(again, first)), f"{dtype} {shape}: run {run + 2} differs"


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp32x3", "tf32", "bf16"])
def test_gpu_inductor_backward(dtype):
    # Inductor compiles the forward and backward graphs around the opaque operator (it may lay the
    # operand copies out its own way, so the check is against float64, not eager's bits)
    A, B, dC = inputs(dict(M=384, K=200, N=130), dtype, "heavy", 7, "cuda")
    train = paths.train_fn(impl(OP, dtype))
    step = torch.compile(lambda a, b: (train(a, b).float() * dC.float()).sum(), fullgraph=True)
    got = torch.autograd.grad(step(*(t.requires_grad_() for t in (A, B))), (A, B))
    for name, g, w in zip(("dA", "dB"), got, reference_grads(A, B, dC)):
        assert g.dtype == A.dtype and rel_err(g, w) <= spec(OP).tol(dtype), (dtype, name, rel_err(g, w))
