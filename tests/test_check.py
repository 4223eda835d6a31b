"""The checker must catch the classic wrong kernels: low precision, unwritten output, an off-by-one mask,
a fresh torch.empty that never gets written, a kernel that raises."""
import math

import pytest
import torch

from mage import ops, registry
from mage.check import check, check_all, rel_error
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
    assert not r.passed and "elements off" in r.reason


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
