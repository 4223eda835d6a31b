"""layernorm's Triton backward: the saved statistics, gradients against float64 autograd of the
reference (normal and heavy-tailed inputs, one-block and chunked rows, awkward and random shapes,
outputs poisoned), bitwise determinism, both operators under opcheck and torch.compile, bad gradients."""
from __future__ import annotations

import functools

import pytest
import torch

from kernels.layernorm.spec import EPS

from tests.support import kernel_checks as testing
from tests.support.kernel_checks import assert_bf16_grads_close, assert_refuses, bf16_inputs, cpu_only, gpu, grads_of, spec
from mage.check import poisoned_allocations
from mage import registry
from mage.ext.training import paths
from mage.ops import shape_key

OP = "layernorm"
# Norm-wise error of each gradient against float64. dx: two row sums of C terms and a few roundings an
# element; dgamma, dbeta: sums over R rows in a fixed tree. 1e-5 (a fifth of the forward's FP32
# tolerance) leaves room for heavy-tailed rows, whose xhat still lies within sqrt(C) of zero.
GRAD_TOL = 1e-5
TINY = [dict(R=1, C=1), dict(R=3, C=70), dict(R=9, C=300), dict(R=70, C=5), dict(R=0, C=16)]


def _bwd():
    from kernels.layernorm import triton_backward
    return triton_backward


reference_grads = functools.partial(testing.reference_grads, OP)  # (inputs, dy): float64 autograd
assert_close = functools.partial(testing.assert_grads_close, names=("dx", "dgamma", "dbeta"), tol=GRAD_TOL)  # (got, want, what)


def _dy(shape, seed, device):
    return torch.randn((shape["R"], shape["C"]), generator=torch.Generator(device).manual_seed(seed + 1), device=device)


def dx_terms(x, gamma, dy):
    """The norm of rstd * dy * gamma: the size of the terms dx is the difference of. A row of one value
    (C = 1) has dx exactly 0 by cancellation; on the H200 the kernel gave 3e-6 there, about one ulp of g
    times rstd = 1/sqrt(eps) (the interpreter gives exactly 0; a fused multiply-add of dy * gamma -
    mean(g) would explain it), infinitely far from 0 in relative terms, within rounding of the terms."""
    if x.numel() == 0:  # no rows (R = 0): no terms; var() of no elements would warn about its degrees of freedom
        return 0.0
    xd = x.double()
    rstd = (xd.var(dim=1, unbiased=False, keepdim=True) + EPS).rsqrt()
    return float((rstd * dy.double() * gamma.double()).norm())


def check_at(shape, dist, device="cpu", seed=0, fn=None):
    inputs = spec(OP).inputs(shape, seed=seed, device=device, dist=dist)
    dy = _dy(shape, seed, device)
    assert_close(grads_of(fn or _bwd().train, inputs, dy), reference_grads(inputs, dy), (shape, dist),
                 scales={"dx": dx_terms(inputs[0], inputs[1], dy)})


def test_a_row_of_one_value_is_judged_against_the_size_of_its_terms():
    # What the H200 gave at R = 1, C = 1 (heavy-tailed): dx = 3e-6 where the exact dx is 0. That is one
    # ulp of the terms that cancel: accepted; a dx of the terms' own size (a missing term) is not.
    x, gamma, beta = spec(OP).inputs(dict(R=1, C=1), dist="heavy")
    dy = _dy(dict(R=1, C=1), 0, "cpu")
    want = reference_grads((x, gamma, beta), dy)
    assert float(want[0].abs().max()) == 0.0
    terms = dx_terms(x, gamma, dy)
    ulp_noise = [want[0].float() + 6e-8 * terms, *(w.float() for w in want[1:])]
    assert_close(ulp_noise, want, "one ulp", scales={"dx": terms})
    wrong = [want[0].float() + 0.5 * terms, *(w.float() for w in want[1:])]
    with pytest.raises(AssertionError):
        assert_close(wrong, want, "a term missing", scales={"dx": terms})
    with pytest.raises(AssertionError):  # without the scale, the H200's result could never pass
        assert_close(ulp_noise, want, "one ulp")


def test_reference_gradients_pass_gradcheck():
    x, g, b = spec(OP).inputs(dict(R=3, C=6))
    assert torch.autograd.gradcheck(spec(OP).reference, tuple(t.double().requires_grad_() for t in (x, g, b)))


def test_training_path_is_registered():
    assert paths.train_fn(registry.get(OP, "triton")) is _bwd().train


@cpu_only
def test_saved_statistics_and_unchanged_output():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    x, g, b = spec(OP).inputs(dict(R=3, C=2100), dist="heavy")  # chunked rows in the forward's default
    x[1] *= 1e25  # a row whose squares overflow: the statistics are saved in x's units all the same
    for shape_x in (x, x[:, :700].contiguous()):  # chunked and one-block
        y, mean, rstd = torch.ops.mage.triton_layernorm_train(shape_x, g[:shape_x.shape[1]], b[:shape_x.shape[1]])
        xd = shape_x.double()
        assert torch.equal(y, torch.ops.mage.triton_layernorm(shape_x, g[:shape_x.shape[1]], b[:shape_x.shape[1]]))
        assert torch.allclose(mean.double(), xd.mean(1), rtol=1e-5, atol=0)
        assert torch.allclose(rstd.double(), 1 / torch.sqrt(xd.var(1, unbiased=False) + 1e-5), rtol=1e-5, atol=0)


def _gradient_cases():
    """Every awkward shape with rows, at both precisions and both distributions; long rows (C >= 4096, many
    seconds a call under the interpreter) once, on normal inputs, in the full tier: their chunked road runs
    in the fast tier in test_forced_tiles_chunked_rows_and_broadcast_gradient (C = 300, forced chunks)."""
    for shape in spec(OP).awkward + TINY:
        for precision in ("fp32", "bf16"):
            for dist in ("normal", "heavy"):
                if shape["C"] and (dist == "normal" or shape["C"] < 4096):
                    yield pytest.param(shape, precision, dist, id=f"{shape_key(shape)}-{precision}-{dist}",
                                       marks=[pytest.mark.slow] if shape["C"] >= 4096 else [])


@cpu_only
@pytest.mark.parametrize("shape, precision, dist", list(_gradient_cases()))
def test_gradients_at_awkward_shapes(shape, precision, dist):
    check = check_at if precision == "fp32" else check_bf16_at  # bf16: storage, against bf16-rounded inputs
    check(shape, dist)


@cpu_only
def test_plain_operator_is_differentiable_too():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    check_at(dict(R=6, C=40), "heavy", fn=torch.ops.mage.triton_layernorm)


@cpu_only
def test_forced_tiles_chunked_rows_and_broadcast_gradient():
    shape = dict(R=13, C=300)
    x, g, b = spec(OP).inputs(shape, dist="heavy")
    dy = _dy(shape, 0, "cpu")
    want = reference_grads((x, g, b), dy)
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    for cfg in (dict(ROWS=4, BLOCK_R=2), dict(MAX_BLOCK_C=64), dict(MAX_BLOCK_C=128, ROWS=2, BLOCK_R=2),
                dict(ROWS=1, BLOCK_R=1)):
        assert_close(_bwd().layernorm_backward(x, g, mean, rstd, dy, **cfg), want, cfg)
    ones = torch.ones(300).expand(13, 300)  # y.sum()'s gradient: row stride 0, read as is
    assert_close(_bwd().layernorm_backward(x, g, mean, rstd, ones), reference_grads((x, g, b), torch.ones(13, 300)),
                 "expanded dy")


@cpu_only
def test_bitwise_deterministic():
    shape = dict(R=45, C=100)
    x, g, b = spec(OP).inputs(shape, dist="heavy")
    dy = _dy(shape, 0, "cpu")
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    for cfg in (dict(ROWS=8, BLOCK_R=2), dict(ROWS=4, MAX_BLOCK_C=32)):
        first = _bwd().layernorm_backward(x, g, mean, rstd, dy, **cfg)
        for _ in range(9):
            again = _bwd().layernorm_backward(x, g, mean, rstd, dy, **cfg)
            assert all(torch.equal(a, c) for a, c in zip(first, again)), cfg


@cpu_only
def test_opcheck_and_compiled_backward():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    x, g, b = spec(OP).inputs(dict(R=5, C=9))
    req = tuple(t.clone().requires_grad_() for t in (x, g, b))
    torch.library.opcheck(torch.ops.mage.triton_layernorm.default, req)
    torch.library.opcheck(torch.ops.mage.triton_layernorm_train.default, req)
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    torch.library.opcheck(torch.ops.mage.triton_layernorm_backward.default, (x, g, mean, rstd, torch.randn(5, 9)))
    dy = torch.randn(5, 9)
    compiled = torch.compile(_bwd().train, backend="aot_eager", fullgraph=True)
    assert_close(grads_of(compiled, (x, g, b), dy), reference_grads((x, g, b), dy), "compiled")


def test_bad_gradients_name_op_and_argument():
    x, g = torch.ones(3, 4), torch.ones(4)
    mean, rstd = torch.zeros(3), torch.ones(3)
    fn = _bwd().layernorm_backward
    assert_refuses(fn, OP, "dy", x, g, mean, rstd, torch.ones(3, 5))
    assert_refuses(fn, OP, "dy", x, g, mean, rstd, torch.ones(3, 4, dtype=torch.float64))
    assert_refuses(fn, OP, "mean", x, g, torch.zeros(4), rstd, torch.ones(3, 4))
    assert_refuses(fn, OP, "rstd", x, g, mean, rstd.double(), torch.ones(3, 4))


@gpu
def test_gpu_random_shapes():
    for i, shape in enumerate(spec(OP).random_shapes(32, seed=16)):
        check_at(shape, "heavy" if i % 2 else "normal", device="cuda", seed=i)
    for shape in spec(OP).awkward + spec(OP).shapes["field"]:
        if shape["C"]:
            check_at(shape, "heavy", device="cuda")


@gpu
def test_gpu_bitwise_deterministic_at_large_shape():
    shape = spec(OP).shapes["large"][0]
    x, g, b = spec(OP).inputs(shape, device="cuda", dist="heavy")
    dy = _dy(shape, 0, "cuda")
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    first = _bwd().layernorm_backward(x, g, mean, rstd, dy)
    for _ in range(9):
        with poisoned_allocations():
            again = _bwd().layernorm_backward(x, g, mean, rstd, dy)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


def test_the_launchers_stats_buffers_are_checked_before_any_launch():
    # the kernel writes one mean and one rstd per row: a short, strided or wrongly typed buffer would be
    # written out of bounds or in the wrong places
    import pytest
    from mage.errors import MageInputError
    from kernels.layernorm.triton_kernel import layernorm
    x, g, b = torch.randn(5, 8), torch.randn(8), torch.randn(8)
    good = torch.empty(5)
    for stats, arg in (((torch.empty(4), good), "stats[0]"), ((good, torch.empty(10)[::2]), "stats[1]"),
                       ((good, torch.empty(5, dtype=torch.float64)), "stats[1]"), ((good,), "stats"),
                       ((None, good), "stats[0]")):
        with pytest.raises(MageInputError, match=f"layernorm: argument '{arg}'".replace("[", r"\[").replace("]", r"\]")):
            layernorm(x, g, b, stats=stats)


# ---- bf16 storage (the model blocks' bf16 rows): bf16 x, gamma, dy; the statistics FP32 -------------
# The bound and its reason: BF16_GRAD_TOL in tests/support/kernel_checks.py (one rounding of each gradient
# after FP32 arithmetic, against float64 on the bf16 values). dx is judged against the size of its terms
# as in FP32: where they cancel, one rounding of the terms is all FP32 promises before the bf16 store.

NAMES = ("dx", "dgamma", "dbeta")


def check_bf16_at(shape, dist, device="cpu", seed=0, fn=None, **config):
    inputs, dy = bf16_inputs(OP, shape, dist, device, seed)
    x, g, b = inputs
    want = reference_grads(inputs, dy)
    if config:
        _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
        assert mean.dtype == rstd.dtype == torch.float32
        got = _bwd().layernorm_backward(x, g, mean, rstd, dy, **config)
    else:
        got = grads_of(fn or _bwd().train, inputs, dy)
    assert_bf16_grads_close(got, want, (shape, dist, config), NAMES, scales={"dx": dx_terms(x, g, dy)})


@cpu_only
def test_bf16_chunked_rows_forced_tiles_plain_operator_and_determinism():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    shape = dict(R=13, C=300)
    for cfg in (dict(ROWS=4, BLOCK_R=2), dict(MAX_BLOCK_C=64), dict(MAX_BLOCK_C=128, ROWS=2, BLOCK_R=2)):
        check_bf16_at(shape, "heavy", **cfg)
    check_bf16_at(dict(R=6, C=40), "heavy", fn=torch.ops.mage.triton_layernorm)
    (x, g, b), dy = bf16_inputs(OP, dict(R=45, C=100), "heavy")
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    for cfg in (dict(ROWS=8, BLOCK_R=2), dict(ROWS=4, MAX_BLOCK_C=32)):
        first = _bwd().layernorm_backward(x, g, mean, rstd, dy, **cfg)
        for _ in range(3):
            with poisoned_allocations():
                again = _bwd().layernorm_backward(x, g, mean, rstd, dy, **cfg)
            assert all(torch.equal(a, c) for a, c in zip(first, again)), cfg


@cpu_only
def test_bf16_operators_and_autograd_dtypes():
    _bwd()  # registers the operators (a test run alone imports nothing else first)
    (x, g, b), dy = bf16_inputs(OP, dict(R=5, C=9), "normal")
    torch.library.opcheck(torch.ops.mage.triton_layernorm_train.default, (x, g, b))
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    torch.library.opcheck(torch.ops.mage.triton_layernorm_backward.default, (x, g, mean, rstd, dy))
    # bf16 copies of FP32 master weights: their gradients reach them as FP32 through the casts
    g32, b32 = (t.float().requires_grad_() for t in (g, b))
    _bwd().train(x, g32.bfloat16(), b32.bfloat16()).backward(dy)
    assert g32.grad.dtype == b32.grad.dtype == torch.float32
    assert torch.equal(b32.grad, _bwd().layernorm_backward(x, g, mean, rstd, dy)[2].float())
    compiled = torch.compile(_bwd().train, backend="aot_eager", fullgraph=True)  # both fakes take bf16
    got, want = grads_of(compiled, (x, g, b), dy), grads_of(_bwd().train, (x, g, b), dy)
    assert all(torch.equal(a, c) for a, c in zip(got, want))


def test_bf16_bad_gradients_name_op_and_argument():
    bf = dict(dtype=torch.bfloat16)
    x, g = torch.ones(3, 4, **bf), torch.ones(4, **bf)
    mean, rstd = torch.zeros(3), torch.ones(3)
    fn = _bwd().layernorm_backward
    assert_refuses(fn, OP, "dy", x, g, mean, rstd, torch.ones(3, 4))  # FP32 dy for a bf16 x
    assert_refuses(fn, OP, "dy", x.float(), g.float(), mean, rstd, torch.ones(3, 4, **bf))
    assert_refuses(fn, OP, "dy", x, g, mean, rstd, torch.ones(3, 5, **bf))
    assert_refuses(fn, OP, "mean", x, g, mean.bfloat16(), rstd, torch.ones(3, 4, **bf))  # statistics stay FP32
    assert_refuses(fn, OP, "gamma", x, g.float(), mean, rstd, torch.ones(3, 4, **bf))  # the forward's rule


@gpu
def test_gpu_bf16_random_shapes_and_bitwise_repeat():
    for i, shape in enumerate(spec(OP).random_shapes(10, seed=116)):
        check_bf16_at(shape, "heavy" if i % 2 else "normal", device="cuda", seed=i)
    (x, g, b), dy = bf16_inputs(OP, spec(OP).shapes["large"][0], "heavy", device="cuda")
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, g, b)
    first = _bwd().layernorm_backward(x, g, mean, rstd, dy)
    for _ in range(9):
        with poisoned_allocations():
            again = _bwd().layernorm_backward(x, g, mean, rstd, dy)
        assert all(torch.equal(a, c) for a, c in zip(first, again))
