"""What the Triton tests share (kernels/<op>/tests/test_<op>_triton.py, test_<op>_backward.py and
tests/test_triton.py): markers for the interpreter and the GPU, the registered column and its pinned
variants, the checks every tile config of an operation must pass, and the backward tests' gradients
against float64 autograd with fresh allocations poisoned (mage.check.poisoned_allocations)."""
from __future__ import annotations

import importlib
import os

import pytest
import torch

from mage import ops, registry
from mage.check import check, poisoned_allocations
from mage.ext.training import paths

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
cpu_only = pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1")


def gpu(fn):
    """Marks a test 'gpu' (the H200 run selects them with -m gpu) and skips it without a CUDA GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(fn))


def module(op: str):
    """The op's Triton module: an operation's ``triton_kernel`` (its kernel, TILES and launcher), or a
    model block's ``triton_block``."""
    for name in ("triton_kernel", "triton_block"):
        try:
            return importlib.import_module(f"kernels.{op}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"kernels.{op}.{name}":
                raise
    raise ModuleNotFoundError(f"kernels.{op} has no triton_kernel.py or triton_block.py")


def impl(op: str, dtype: str = "fp32") -> registry.Impl:
    return registry.get(op, "triton", dtype)


def variant(op: str, dtype: str = "fp32", **config) -> registry.Impl:
    return impl(op, dtype).variant(**config)


def check_every_sweep_config(op: str, shape: dict, dtype: str = "fp32") -> None:
    """Every config of the op's sweep passes the float64 check at one small awkward shape (the
    interpreter's cost grows with the tile size, so one shape each)."""
    for cfg in impl(op, dtype).sweep:
        r = check(variant(op, dtype, **cfg), shape, trials=1, device="cpu")
        assert r.passed, f"{op} {cfg}: {r.reason}"


def check_shapes(impl: registry.Impl, shapes, dist: str = "normal", trials: int = 1) -> None:
    """``impl`` passes the float64 check on the CPU at every one of ``shapes``."""
    for shape in shapes:
        r = check(impl, shape, trials=trials, dist=dist, device="cpu")
        assert r.passed, (shape, dist, r.reason)


def check_bf16_columns(op: str, shapes, dist: str, forced: tuple | None = None) -> None:
    """An operation's bf16 columns (bf16 storage, FP32 arithmetic) against float64 on the bf16 values at
    ``shapes``: eager PyTorch always; the Triton kernel under the interpreter, which converts FP32 to
    bf16 by truncation (twice the GPU's rounding error, still within bf16's 2e-2); ``forced``, a
    (config, shape) pair, checks one more road of the kernel there."""
    check_shapes(registry.get(op, "pytorch", "bf16"), shapes, dist, trials=2)
    if not INTERPRET:
        return
    check_shapes(impl(op, "bf16"), shapes, dist)
    if forced:
        config, shape = forced
        r = check(variant(op, "bf16", **config), shape, trials=1, dist=dist, device="cpu")
        assert r.passed, (config, shape, r.reason)


def gpu_failures(impl: registry.Impl, shapes) -> list:
    """(shape, reason) for every one of ``shapes`` at which ``impl`` misses the float64 check on the GPU:
    each shape its own seed, every third heavy-tailed; all failures, so one run shows the pattern. Shapes
    outside ``impl``'s stated limits (a library's widths, a config's shared-memory budget) are left out.
    Each failure is also appended, as it happens, to the file MAGE_FAILURE_LOG names: a GPU run cut by a
    time limit before pytest's summary keeps the shapes and reasons it found."""
    failures, checked = [], 0
    for k, shape in enumerate(shapes):
        if impl.outside_limits(shape):
            continue
        checked += 1
        dist = "heavy" if k % 3 == 0 else "normal"
        r = check(impl, shape, trials=1, seed=k, dist=dist, device="cuda")
        if not r.passed:
            failures.append((shape, r.reason))
            _log_failure(impl, shape, dist, r.reason)
    if not checked:  # every shape outside the limits: nothing was checked, which is no pass
        failures.append((None, "no shape within the implementation's stated limits was checked"))
    return failures


def _log_failure(impl, shape, dist: str, reason: str) -> None:
    path = os.environ.get("MAGE_FAILURE_LOG")
    if path:  # one line a failure, appended at once (several test workers may share the file)
        with open(path, "a") as f:
            f.write(f"{impl.op}/{impl.name}/{impl.dtype} {shape} {dist}: {reason}\n")


def excluded() -> set:
    """Implementations this run leaves out by name (MAGE_GPU_EXCLUDE=rust_native,rust_ptx_py)."""
    return {n for n in os.environ.get("MAGE_GPU_EXCLUDE", "").split(",") if n}


def usable(impl):
    """On a GPU machine an implementation that cannot run is a failure, not a skip, unless excluded."""
    why = impl.runs_on("cuda")
    if impl.name in excluded():
        pytest.skip(f"excluded by MAGE_GPU_EXCLUDE ({why or 'available'})")
    if why:
        pytest.fail(f"{impl.op}/{impl.name}/{impl.dtype} is registered but cannot run on this GPU machine: {why}")


def check_forced(op: str, config: dict, shape: dict, dist: str = "heavy") -> None:
    r = check(variant(op, **config), shape, trials=2, dist=dist, device="cpu")
    assert r.passed, f"{op} {config} {shape}: {r.reason}"


def rel_err(got, ref) -> float:
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-300))


def assert_refuses(fn, op: str, arg: str, *args, **kwargs):
    """``fn(*args)`` raises the project's input error naming ``op`` and ``arg``."""
    from mage.errors import MageInputError
    with pytest.raises(MageInputError) as e:
        fn(*args, **kwargs)
    assert (e.value.op, e.value.arg) == (op, arg), str(e.value)
    return e.value


def spec(op: str):
    return ops.OPS[op]


# ---- backward tests (kernels/<op>/tests/test_<op>_backward.py)
def grads_of(fn, inputs, dy) -> list:
    """The gradients of ``fn(*inputs)`` for the incoming gradient ``dy``, every buffer forward and backward
    allocate poisoned with NaN (on the CPU too), so an element they leave unwritten fails the comparison."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    with poisoned_allocations():  # forward too: a compiled backward must run as its forward was compiled
        fn(*leaves).backward(dy)
    return [t.grad for t in leaves]


def reference_grads(op: str, inputs, dy) -> list:
    """The gradients by float64 autograd through the spec's reference."""
    return grads_of(spec(op).reference, [t.double() for t in inputs], dy.double())


def assert_grads_close(got, want, what, *, names, tol: float, scales=None) -> None:
    """Each float32 gradient in ``got`` has its reference's shape, is finite and lies within ``tol``
    (norm-wise) of it. ``scales`` (name -> float64 norm) gives a gradient that is a difference of larger
    terms the size of those terms: where they cancel to (nearly) zero, FP32 can only promise a result
    within its rounding of them, and a norm-wise error against the zero itself would be unbounded."""
    scales = scales or {}
    for g, r, name in zip(got, want, names):
        assert g.dtype == torch.float32 and g.shape == r.shape, (what, name)
        size = max(float(r.norm()), float(scales.get(name, 0.0)), 1e-300)
        err = float((g.double() - r).norm() / size) if r.numel() else 0.0
        assert err <= tol and bool(torch.isfinite(g).all()), (what, name, err)


# ---- bf16 gradients (each op's test_<op>_backward.py): bf16 in, FP32 sums, each gradient rounded once
# The reference is float64 autograd on the bf16 values themselves, so what is left is the kernel's own
# error: one rounding of each gradient to bf16 after FP32 arithmetic. On the GPU the store rounds to
# nearest (relative error at most 2^-8 = 3.9e-3 an element); the interpreter truncates (at most 2^-7 =
# 7.8e-3), so the norm-wise bound is 8e-3 on both, as the forward's bf16 tests state theirs, and inside
# the bf16 tolerance the harness checks the bf16 blocks against (spec.tol("bf16")).
BF16_GRAD_TOL = 8e-3


def bf16_inputs(op, shape, dist, device="cpu", seed=0):
    """The op's inputs and a gradient dy, all rounded to bf16."""
    inputs = [t.bfloat16() for t in spec(op).inputs(shape, seed=seed, device=device, dist=dist)]
    g = torch.Generator(device).manual_seed(seed + 1)
    return inputs, torch.randn(inputs[0].shape, generator=g, device=device).bfloat16()


def assert_bf16_grads_close(got, want, what, names, scales=None):
    """Each gradient is bf16 with its reference's shape, finite, and within BF16_GRAD_TOL of it norm-wise
    (``scales`` as in assert_grads_close: the size of the terms a gradient is a difference of)."""
    for g, r, name in zip(got, want, names):
        assert g.dtype == torch.bfloat16 and g.shape == r.shape, (what, name, g.dtype)
        assert bool(torch.isfinite(g).all()), (what, name, "non-finite")
        size = max(float(r.norm()), float((scales or {}).get(name, 0.0)), 1e-300)
        err = float((g.double() - r.to(g.device)).norm() / size) if r.numel() else 0.0
        assert err <= BF16_GRAD_TOL, (what, name, err)


def pair_reference_grads(op: str, A, B, dout) -> tuple:
    """(dA, dB) of a two-operand op by float64 autograd through the spec's reference."""
    Ad, Bd = (t.detach().double().requires_grad_() for t in (A, B))
    return torch.autograd.grad(spec(op).reference(Ad, Bd), (Ad, Bd), dout.double())


def pair_triton_grads(op: str, A, B, dout, dtype: str) -> tuple:
    """(dA, dB) through the 'triton' column's registered training path at ``dtype``."""
    A, B = (t.detach().requires_grad_() for t in (A, B))
    return torch.autograd.grad(paths.train_fn(impl(op, dtype))(A, B), (A, B), dout)


def assert_pair_grads_close(op: str, A, B, dout, dtype: str, grad_dtype, what="") -> None:
    """The Triton (dA, dB) have the reference's shapes, dtype ``grad_dtype`` and lie within the op's
    tolerance at ``dtype``."""
    tol = spec(op).tol(dtype)
    for name, got, want in zip(("dA", "dB"), pair_triton_grads(op, A, B, dout, dtype),
                               pair_reference_grads(op, A, B, dout)):
        assert got.shape == want.shape and got.dtype == grad_dtype, (name, got.shape, got.dtype)
        err = rel_err(got, want.to(got.device))
        assert err <= tol, f"{dtype} {name} {what}: relative error {err:.2e} > {tol:.0e}"


def check_reference_gradcheck(op: str, shape: dict) -> None:
    """The spec's float64 reference passes torch's gradcheck in every input at ``shape``."""
    args = tuple(t.double().requires_grad_() for t in spec(op).inputs(shape))
    assert torch.autograd.gradcheck(spec(op).reference, args)


def check_every_precision_trains(op: str, dtypes=None) -> None:
    """Every precision of the 'triton' column (or of ``dtypes``, where others are forward only) registered
    a training path of its own."""
    for dtype in dtypes or spec(op).dtypes:
        fn = paths.train_fn(impl(op, dtype))
        assert fn is not None and fn is not impl(op, dtype).fn, dtype


def check_mixed_precisions_refused(op: str, args: tuple, stray: int) -> None:
    """bf16 inputs ``args`` with the one at index ``stray`` made FP32: refused, naming the operation and
    that argument, by the spec's checks, the Triton launcher, its PyTorch operator and eager PyTorch.
    And the first input FP32 among bf16 others: refused naming the second (the first sets the dtype)."""
    import mage
    names = spec(op).args
    bad = tuple(a.float() if i == stray else a for i, a in enumerate(args))
    first = (args[0].float(),) + tuple(args[1:])
    for fn in (spec(op).validate, getattr(module(op), op), getattr(torch.ops.mage, f"triton_{op}"),
               lambda *a: mage.run(op, "pytorch", *a, dtype="bf16")):
        e = assert_refuses(fn, op, names[stray], *bad)
        assert f"has dtype float32, but {names[0]} has bfloat16" in str(e)
        assert_refuses(fn, op, names[1], *first)


class Counted:
    """A Triton kernel whose launches are recorded (each grid appended to ``calls``) and then run: patched in
    where a test asks which kernel ran and how often."""

    def __init__(self, kernel, calls: list):
        self.kernel, self.calls = kernel, calls

    def __getitem__(self, grid):
        self.calls.append(grid)
        return self.kernel[grid]


class Keywords:
    """A Triton kernel whose launches' keyword arguments (its constexprs and launch options) are recorded (each
    launch's appended to ``seen``) and then run: patched in where a test asks how a kernel was launched."""

    def __init__(self, kernel, seen: list):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        return lambda *a, **kw: self.seen.append(kw) or self.kernel[grid](*a, **kw)
