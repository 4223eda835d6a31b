"""The checker must catch the classic wrong kernels: low precision, unwritten output, an off-by-one mask,
a fresh torch.empty that never gets written (on the CPU too), a kernel that raises; its verdict is
norm-wise and elementwise, and the poisoning the tests share fills every fresh allocation with NaN."""
import math

import pytest
import torch

from mage import ops, registry
from mage.check import check, check_all, poisoned_allocations, rel_error
from mage.errors import MageInputError
from mage.registry import Impl


def _impl(op, fn, **kw):
    return Impl(op=op, name="test", fn=fn, needs_cuda=False, **kw)


def _write(out, y):
    return y if out is None else out.copy_(y)


def test_rel_error_nan_never_passes():
    ref = torch.ones(3, dtype=torch.float64)
    assert rel_error(torch.tensor([1.0, float("nan"), 1.0]), ref) == math.inf
    assert rel_error(torch.ones(3), ref) == 0.0


@pytest.mark.parametrize("op", list(ops.OPS))
def test_pytorch_impls_pass_at_awkward_shapes(op):
    # the kernel columns have their own test files; here the baselines the checker is judged against
    for impl in registry.impls(op):
        if impl.family != "pytorch" or impl.runs_on("cpu"):
            continue
        for shape in ops.get(op).awkward:
            for dist in ("normal", "heavy"):
                r = check(impl, shape, trials=2, dist=dist)
                assert r.passed, (impl.key, shape, dist, r.reason)


def test_low_precision_fails():
    # half-precision arithmetic: about 5e-4 relative error, far above the FP32 tolerance
    impl = _impl("matmul", lambda A, B, out=None: _write(out, (A.half().float() @ B.half().float())))
    r = check(impl, dict(M=64, K=64, N=64))
    assert not r.passed and "relative error" in r.reason


def test_tf32_like_rounding_fails_fp32_but_passes_tf32():
    def tf32ish(A, B, out=None):
        # keep 10 mantissa bits, as TF32 does
        q = lambda t: (t.view(torch.int32) & ~0x1FFF).view(torch.float32)  # noqa: E731
        return _write(out, q(A) @ q(B))
    assert not check(_impl("matmul", tf32ish), dict(M=64, K=256, N=64)).passed
    assert check(_impl("matmul", tf32ish, dtype="tf32"), dict(M=64, K=256, N=64)).passed


def test_unwritten_elements_fail():
    def half_written(x, b, out=None):
        y = torch.nn.functional.gelu(x + b)
        out = torch.empty_like(y) if out is None else out
        out[: max(1, len(out) // 2)] = y[: max(1, len(out) // 2)]
        return out
    r = check(_impl("bias_gelu", half_written), dict(R=8, C=16))
    assert not r.passed and "unwritten" in r.reason


def test_returning_fresh_empty_fails():
    r = check(_impl("bias_gelu", lambda x, b, out=None: torch.empty_like(x)), dict(R=8, C=16))
    assert not r.passed and "did not return the out buffer" in r.reason


def test_off_by_one_mask_fails():
    def drops_last_column(x, b, out=None):
        y = torch.nn.functional.gelu(x + b)
        y[:, -1] = 0.0  # a mask `cols < C - 1`: the last column is never computed
        return _write(out, y)
    r = check(_impl("bias_gelu", drops_last_column), dict(R=4, C=129))
    assert not r.passed and "4 of 516 elements outside" in r.reason and "worst at index (" in r.reason


def test_raising_kernel_is_a_failed_check_not_a_crash():
    def boom(*a, out=None):
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
    r = check(_impl("layernorm", boom), dict(R=2, C=3))
    assert not r.passed and "CUDA_ERROR_ILLEGAL_ADDRESS" in r.reason


def test_cuda_only_impl_is_reported_not_run():
    impl = Impl(op="layernorm", name="gpu-only", fn=lambda *a, out=None: None, needs_cuda=True)
    r = check(impl, dict(R=2, C=3), device="cpu")
    assert not r.ran and r.reason.startswith("not run")


def test_wrong_on_second_input_set_is_caught():
    calls = {"n": 0}

    def right_once(x, gamma, beta, out=None):
        calls["n"] += 1
        y = torch.nn.functional.layer_norm(x, (x.shape[1],), gamma, beta, ops.EPS_LAYERNORM)
        return _write(out, y if calls["n"] <= 2 else y * 1.01)  # the allocating call is the second
    assert not check(_impl("layernorm", right_once), dict(R=4, C=8), trials=2).passed


@pytest.mark.parametrize("trials", [0, -1])
def test_no_trials_is_refused_not_passed(trials):
    impl = _impl("layernorm", lambda *a, out=None: out)
    with pytest.raises(MageInputError, match="check: argument 'trials'"):
        check(impl, dict(R=2, C=3), trials=trials)
    with pytest.raises(MageInputError, match="check: argument 'trials'"):
        check_all([impl], trials=trials)


def test_raising_only_when_allocating_is_a_failed_check_not_a_crash():
    def needs_out(x, gamma, beta, out=None):
        if out is None:
            raise RuntimeError("no buffer")
        return out.copy_(ops.get("layernorm").reference(x, gamma, beta))  # right whenever it is given out=
    r = check(_impl("layernorm", needs_out), dict(R=2, C=3))
    assert not r.passed and "no buffer" in r.reason


def test_the_specs_own_tolerance_is_used(monkeypatch):
    """A spec that states a tolerance is held to it, not to the precision's default (the check read
    only the default before, so a block's looser or tighter bound was ignored)."""
    import dataclasses

    from mage import ops, registry
    spec = ops.OPS["bias_gelu"]
    impl = registry.get("bias_gelu", "pytorch")
    assert check(impl, dict(R=3, C=5)).passed
    monkeypatch.setitem(ops.OPS, "bias_gelu", dataclasses.replace(spec, tolerance={"fp32": 1e-30}))
    r = check(impl, dict(R=3, C=5))
    assert not r.passed and r.tolerance == 1e-30, r


def test_a_fresh_allocation_left_half_unwritten_fails_on_the_cpu():
    """Called without out=, the implementation writes half of a fresh torch.empty, having computed the
    whole answer in a buffer of that size and freed it just before. On the CPU (no caching allocator to
    poison: freed memory goes back to malloc, which hands the same block back) the unwritten half held
    right values and passed; poisoned allocations fill it with NaN."""
    def lazy(A, B, out=None):
        if out is not None:
            return torch.matmul(A, B, out=out)
        whole = torch.matmul(A, B, out=torch.empty(A.shape[0], B.shape[1]))
        del whole
        fresh = torch.empty(A.shape[0], B.shape[1])
        fresh[: len(A) // 2] = A[: len(A) // 2] @ B
        return fresh
    r = check(_impl("matmul", lazy), dict(M=256, K=8, N=256), device="cpu")
    assert not r.passed and r.reason == "called without out=: 32768 of 65536 output elements left unwritten (still NaN)", r


def test_poisoned_allocations_fill_every_fresh_tensor_and_restore_torch():
    was = torch.are_deterministic_algorithms_enabled()
    with poisoned_allocations():
        assert torch.isnan(torch.empty(1000)).all() and torch.isnan(torch.empty(3, 5).new_empty(7)).all()
        assert (torch.empty(4, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
    assert torch.are_deterministic_algorithms_enabled() == was


def test_a_gradient_left_partly_unwritten_is_nan_under_poisoned_allocations():
    """The backward tests' road: a backward that writes only half of a fresh gradient buffer."""
    class HalfGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, dy):
            dx = torch.empty_like(dy)
            dx[: len(dy) // 2] = 2 * dy[: len(dy) // 2]
            return dx
    x = torch.randn(64, requires_grad=True)
    with poisoned_allocations():
        HalfGrad.apply(x).backward(torch.ones(64))
    assert torch.isnan(x.grad[32:]).all() and torch.equal(x.grad[:32], torch.full((32,), 2.0))


def _zero_one(y, which):
    """y with one element zeroed: the largest, or a typical one (the nearest to the root-mean-square)."""
    flat, a = y.view(-1), y.view(-1).float().abs()
    flat[a.argmax() if which == "largest" else (a - a.pow(2).mean().sqrt()).abs().argmin()] = 0
    return y


@pytest.mark.parametrize("which", ["typical", "largest"])
def test_bf16_with_one_element_zeroed_fails(which):
    """One typical element of 6144 zeroed moves the norm-wise error by about 1e-2, inside bf16's 2e-2:
    the elementwise bound catches it (a norm-wise verdict alone passed it)."""
    def zeroed(x, b, out=None):
        return _write(out, _zero_one(torch.nn.functional.gelu(x.float() + b.float()).bfloat16(), which))
    r = check(_impl("bias_gelu", zeroed, dtype="bf16"), dict(R=64, C=96))
    assert not r.passed and "1 of 6144 elements outside" in r.reason, r.reason
    right = _impl("bias_gelu", lambda x, b, out=None: _write(out, torch.nn.functional.gelu(x.float() + b.float()).bfloat16()),
                  dtype="bf16")
    assert check(right, dict(R=64, C=96)).passed


def _tf32(t):
    """t with TF32's 10 mantissa bits (the low 13 cut, as test_tf32_like_rounding_fails_fp32_but_passes_tf32)."""
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)


def test_the_fp32_tolerance_catches_a_tail_road_slipped_to_tf32():
    """A matmul of 132 rows whose tail road (the last 4 rows past a 128-row tile) multiplies in TF32:
    norm-wise about 1.3e-4 from float64, above FP32's 5e-5 and below a fourfold looser 2e-4, which
    passed it norm-wise (the book's error; the elementwise bound would still catch it, so ask for the
    norm-wise verdict itself)."""
    def tail_in_tf32(A, B, out=None):
        C = A @ B
        C[-4:] = _tf32(A[-4:]) @ _tf32(B)
        return _write(out, C)
    r = check(_impl("matmul", tail_in_tf32), dict(M=132, K=256, N=64))
    assert not r.passed and r.reason.startswith("relative error") and r.error > r.tolerance, r


def test_a_sum_that_cancels_is_judged_by_the_size_of_its_terms():
    """A correct FP32 sum of many terms that cancel carries their rounding: against |ref| it failed the
    elementwise bound (the skewed graph's hub node on the H200, eager PyTorch included); against the size
    of its terms (``Op.magnitude``) it passes, and a wrong sum still fails."""
    import torch
    from mage.check import outside
    gen = torch.Generator().manual_seed(3)
    hub = 100 * torch.randn(2_000, 1_000, generator=gen, dtype=torch.float64)
    hub -= hub.mean()  # two million terms that cancel to nothing
    others = torch.randn(1000, 16, generator=gen, dtype=torch.float64)  # a thousand ordinary nodes
    ref = torch.cat([hub.sum().reshape(1), others.sum(1)])
    acc = torch.zeros((), dtype=torch.float32)
    for block in hub.float().sum(1):  # FP32 partial sums added one after another, as atomic adds land
        acc += block
    got = torch.cat([acc.reshape(1), others.float().sum(1)])
    size = torch.cat([hub.abs().sum().reshape(1), others.abs().sum(1)])
    assert outside(got, ref, "fp32")[0] and not outside(got, ref, "fp32", size).any()
    assert outside(got + 1e-3 * size.float(), ref, "fp32", size).all()


def test_a_stated_fraction_of_outliers_is_allowed_and_no_more():
    """bf16 blocks state that one element in 10^5 may fall outside the bound (eager PyTorch's own
    composition puts single elements there); more than that, or a NaN, still fails."""
    import torch
    from mage.check import _verdict
    ref = torch.randn(1000, 1000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = ref.clone()
    y[0, 0] += 10.0
    assert _verdict(y, 0.0, ref, 2e-2, "bf16") and not _verdict(y, 0.0, ref, 2e-2, "bf16", allowed=1e-5)
    y[1, :20] += 10.0
    assert _verdict(y, 0.0, ref, 2e-2, "bf16", allowed=1e-5)
    y = ref.clone()
    y[5, 5] = float("inf")
    assert _verdict(y, 0.0, ref, 2e-2, "bf16", allowed=1e-5)


def test_a_row_scaled_bound_follows_each_rows_own_scale():
    """``Op.row_scale``: an error of 15% of a row's own scale, in a row fifty times the others, is inside
    the bound (bf16: a quarter of the row's rms), where the whole output's rms would flag it; an ordinary
    row keeps the whole output's rms, so a large error there stays outside."""
    from mage.check import outside
    g = torch.Generator().manual_seed(5)
    ref = torch.randn(40, 16, generator=g, dtype=torch.float64)
    ref[7] *= 50
    got = ref.clone()
    got[7, 3] += 0.15 * float(ref[7].pow(2).mean().sqrt())
    assert outside(got, ref, "bf16").sum() == 1 and outside(got, ref, "bf16", rows=True).sum() == 0
    bad = ref.clone()
    bad[2, 3] += 5 * float(ref[2].pow(2).mean().sqrt())
    assert outside(bad, ref, "bf16", rows=True)[2, 3]
