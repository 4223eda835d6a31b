"""bias_gelu's Triton backward: gradients against float64 autograd of the reference (normal and
heavy-tailed inputs, awkward and random shapes, outputs poisoned), bitwise determinism, the operator
under opcheck and torch.compile, bad gradients refused."""
from __future__ import annotations

import functools

import pytest
import torch

from tests.support import kernel_checks as testing
from tests.support.kernel_checks import (BF16_GRAD_TOL, assert_bf16_grads_close, assert_refuses, bf16_inputs, cpu_only,
                                         gpu, grads_of, spec)
from mage.check import poisoned_allocations
from mage import registry
from mage.ext.training import paths

OP = "bias_gelu"
# Each gradient's norm-wise error against float64: dx is elementwise (a few ulps), db a sum of up to
# R terms in a fixed tree (error ~ log2(R) ulps); 1e-5 leaves an order of magnitude to spare.
GRAD_TOL = 1e-5
TINY = [dict(R=1, C=1), dict(R=3, C=70), dict(R=37, C=129), dict(R=70, C=5), dict(R=0, C=16)]


def _bwd():
    from kernels.bias_gelu import triton_backward
    return triton_backward


reference_grads = functools.partial(testing.reference_grads, OP)  # (inputs, dy): float64 autograd
assert_close = functools.partial(testing.assert_grads_close, names=("dx", "db"), tol=GRAD_TOL)  # (got, want, what)


def check_at(shape, dist, device="cpu", seed=0):
    x, b = spec(OP).inputs(shape, seed=seed, device=device, dist=dist)
    dy = torch.randn(x.shape, generator=torch.Generator(device).manual_seed(seed + 1), device=device)
    assert_close(grads_of(_bwd().train, (x, b), dy), reference_grads((x, b), dy), (shape, dist))


def test_reference_gradients_pass_gradcheck():
    x, b = spec(OP).inputs(dict(R=3, C=5))
    assert torch.autograd.gradcheck(spec(OP).reference, (x.double().requires_grad_(), b.double().requires_grad_()))


def test_training_path_is_registered():
    assert paths.train_fn(registry.get(OP, "triton")) is _bwd().train


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_gradients_at_awkward_shapes(dist):
    for shape in spec(OP).awkward + TINY:
        check_at(shape, dist)


@cpu_only
def test_forced_tiles_and_broadcast_gradient():
    x, b = spec(OP).inputs(dict(R=13, C=37), dist="heavy")
    dy = torch.randn(13, 37)
    want = reference_grads((x, b), dy)
    for cfg in (dict(ROWS=4, BLOCK_R=2, BLOCK_C=16), dict(ROWS=1, BLOCK_R=1, BLOCK_C=64), dict(ROWS=32, BLOCK_R=8)):
        assert_close(_bwd().bias_gelu_backward(x, b, dy, **cfg), want, cfg)
    # y.sum() hands back an expanded gradient (row stride 0): read as is
    g = _bwd().bias_gelu_backward(x, b, torch.ones(37).expand(13, 37))
    assert_close(g, reference_grads((x, b), torch.ones(13, 37)), "expanded dy")


@cpu_only
def test_bitwise_deterministic():
    x, b = spec(OP).inputs(dict(R=67, C=40), dist="heavy")
    dy = torch.randn(67, 40)
    first = _bwd().bias_gelu_backward(x, b, dy, ROWS=8, BLOCK_R=2, BLOCK_C=16)
    for _ in range(9):
        again = _bwd().bias_gelu_backward(x, b, dy, ROWS=8, BLOCK_R=2, BLOCK_C=16)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


@cpu_only
def test_opcheck_and_compiled_backward():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    x, b = spec(OP).inputs(dict(R=5, C=9))
    xr, br = x.clone().requires_grad_(), b.clone().requires_grad_()
    torch.library.opcheck(torch.ops.mage.triton_bias_gelu.default, (xr, br))
    torch.library.opcheck(torch.ops.mage.triton_bias_gelu_backward.default, (x, b, torch.randn(5, 9)))
    dy = torch.randn(5, 9)
    compiled = torch.compile(_bwd().train, backend="aot_eager", fullgraph=True)
    assert_close(grads_of(compiled, (x, b), dy), reference_grads((x, b), dy), "compiled")


def test_bad_gradients_name_op_and_argument():
    x, b = torch.ones(3, 4), torch.ones(4)
    fn = _bwd().bias_gelu_backward
    assert_refuses(fn, OP, "dy", x, b, torch.ones(3, 5))
    assert_refuses(fn, OP, "dy", x, b, torch.ones(3, 4, dtype=torch.float64))
    assert_refuses(fn, OP, "dy", x, b, [[1.0]])
    assert_refuses(fn, OP, "b", x, torch.ones(5), torch.ones(3, 4))


@gpu
def test_gpu_random_shapes():
    for i, shape in enumerate(spec(OP).random_shapes(32, seed=16)):
        check_at(shape, "heavy" if i % 2 else "normal", device="cuda", seed=i)
    for shape in spec(OP).awkward + spec(OP).shapes["field"]:
        check_at(shape, "heavy", device="cuda")


@gpu
def test_gpu_bitwise_deterministic_at_large_shape():
    x, b = spec(OP).inputs(spec(OP).shapes["large"][0], device="cuda", dist="heavy")
    dy = torch.randn_like(x)
    first = _bwd().bias_gelu_backward(x, b, dy)
    for _ in range(9):
        with poisoned_allocations():
            again = _bwd().bias_gelu_backward(x, b, dy)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


# ---- bf16 storage (the model blocks' bf16 rows): bf16 in, FP32 sums, each gradient rounded once ------
# The bound and its reason: BF16_GRAD_TOL in tests/support/kernel_checks.py.
assert BF16_GRAD_TOL <= spec(OP).tol("bf16")


def check_bf16_at(shape, dist, device="cpu", seed=0, **config):
    (x, b), dy = bf16_inputs(OP, shape, dist, device, seed)
    want = reference_grads((x, b), dy)
    got = _bwd().bias_gelu_backward(x, b, dy, **config) if config else grads_of(_bwd().train, (x, b), dy)
    assert_bf16_grads_close(got, want, (shape, dist, config), ("dx", "db"))


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_gradients_at_awkward_shapes(dist):
    for shape in spec(OP).awkward + TINY:
        check_bf16_at(shape, dist)


@cpu_only
def test_bf16_forced_tiles_and_determinism():
    for cfg in (dict(ROWS=4, BLOCK_R=2, BLOCK_C=16), dict(ROWS=32, BLOCK_R=8)):
        check_bf16_at(dict(R=67, C=40), "heavy", **cfg)
    (x, b), dy = bf16_inputs(OP, dict(R=67, C=40), "heavy")
    first = _bwd().bias_gelu_backward(x, b, dy, ROWS=8, BLOCK_R=2, BLOCK_C=16)
    for _ in range(3):
        with poisoned_allocations():
            again = _bwd().bias_gelu_backward(x, b, dy, ROWS=8, BLOCK_R=2, BLOCK_C=16)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


@cpu_only
def test_bf16_backward_operator_and_autograd_dtypes():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    (x, b), dy = bf16_inputs(OP, dict(R=5, C=9), "normal")
    torch.library.opcheck(torch.ops.mage.triton_bias_gelu_backward.default, (x, b, dy))
    # a bf16 copy of FP32 master weights: the gradient reaches them as FP32 through the cast
    x32, b32 = (t.float().requires_grad_() for t in (x, b))
    _bwd().train(x32.bfloat16(), b32.bfloat16()).backward(dy)
    assert x32.grad.dtype == b32.grad.dtype == torch.float32
    assert torch.equal(b32.grad, _bwd().bias_gelu_backward(x, b, dy)[1].float())


@cpu_only
def test_bf16_compiled_backward():
    (x, b), dy = bf16_inputs(OP, dict(R=5, C=9), "normal")
    compiled = torch.compile(_bwd().train, backend="aot_eager", fullgraph=True)
    got, want = grads_of(compiled, (x, b), dy), grads_of(_bwd().train, (x, b), dy)
    assert all(torch.equal(a, c) for a, c in zip(got, want))


def test_bf16_bad_gradients_name_op_and_argument():
    x, b = torch.ones(3, 4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16)
    fn = _bwd().bias_gelu_backward
    assert_refuses(fn, OP, "dy", x, b, torch.ones(3, 4))  # FP32 dy for a bf16 x
    assert_refuses(fn, OP, "dy", x.float(), b.float(), torch.ones(3, 4, dtype=torch.bfloat16))
    assert_refuses(fn, OP, "dy", x, b, torch.ones(4, 3, dtype=torch.bfloat16))
    assert_refuses(fn, OP, "b", x, b.float(), torch.ones(3, 4, dtype=torch.bfloat16))  # the forward's rule


@gpu
def test_gpu_bf16_random_shapes_and_bitwise_repeat():
    for i, shape in enumerate(spec(OP).random_shapes(10, seed=116)):
        check_bf16_at(shape, "heavy" if i % 2 else "normal", device="cuda", seed=i)
    (x, b), dy = bf16_inputs(OP, spec(OP).shapes["large"][0], "heavy", device="cuda")
    first = _bwd().bias_gelu_backward(x, b, dy)
    for _ in range(9):
        with poisoned_allocations():
            again = _bwd().bias_gelu_backward(x, b, dy)
        assert all(torch.equal(a, c) for a, c in zip(first, again))
