"""Correctness against the float64 reference: fresh seeded inputs, outputs poisoned with NaN, a verdict
norm-wise and elementwise with reasons. ``check`` never raises for a failing implementation, so tests,
notebooks and logs all use it; ``poisoned_allocations`` is the poisoning the tests share."""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import asdict, dataclass

import torch

from . import ops
from .precision import PRECISIONS
from .errors import MageInputError
from .ops import shape_key


@dataclass
class CheckResult:
    op: str
    impl: str
    dtype: str
    shape: str
    dist: str
    error: float  # worst relative error over the trials (inf: non-finite or unwritten output)
    tolerance: float
    passed: bool
    trials: int
    reason: str = ""  # why it failed or was not run; empty when it passed
    ran: bool = True

    def row(self) -> dict:
        return asdict(self)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when out holds NaN or Inf (NaN never passes)."""
    if ref.numel() == 0:
        return 0.0
    out = out.double().to(ref.device)
    if not torch.isfinite(out).all():
        return math.inf
    denom = float(ref.norm())
    diff = float((out - ref).norm())
    return diff / denom if denom > 0 else diff


def elementwise_bounds(dtype: str) -> tuple[float, float]:
    """(atol, rtol) of the precision ``dtype``: atol in units of the reference's root-mean-square."""
    p = PRECISIONS[dtype]
    return p.atol, p.rtol


def _bound(ref: torch.Tensor, dtype: str, size=None, rows: bool = False, spread=None) -> torch.Tensor:
    """Each element's bound: ``atol * rms|ref| + rtol * size``, the size |ref| unless the operation gives
    its elements' size before cancellation (``Op.magnitude``); with ``rows`` (``Op.row_scale``) the rms is
    the larger of the whole output's and the element's row's (the last axis); plus twice ``spread``
    (``Op.storage_error``) where given."""
    atol, rtol = elementwise_bounds(dtype)
    rms = float(ref.pow(2).mean().sqrt()) if ref.numel() else 0.0
    scale = ref.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(rms) if rows and ref.dim() and ref.numel() else rms
    bound = atol * scale + rtol * (ref.abs() if size is None else size.to(ref.device))
    return bound if spread is None else bound + 2 * spread.to(ref.device)


def storage_spread(model, inputs, dtype: str, draws: int = 2, seed: int = 0, exact=None):
    """How far storing a computation's intermediates at ``dtype`` can move each output element: the
    largest change of ``model(*inputs, R=...)`` (its float64 reference, with ``R`` applied to every
    intermediate it stores) when ``R`` rounds to ``dtype``, or multiplies by 1 + e with e uniform within
    half the precision's spacing (``draws`` seeded draws: implementations round at other points and in
    other orders, so one rounding pattern alone would under-state some elements). ``exact``: the model's
    answer where the caller has it. None for 4-byte precisions, whose storage moves outputs far less than
    their tolerance."""
    storage = PRECISIONS[dtype].storage
    if torch.finfo(storage).bits >= 32:
        return None
    half = torch.finfo(storage).eps / 2
    exact = model(*inputs) if exact is None else exact
    worst = (model(*inputs, R=lambda t: t.to(storage).double()) - exact).abs()
    gen = torch.Generator(device=exact.device).manual_seed(seed)

    def jitter(t):
        return t * (1 + half * (2 * torch.rand(t.shape, generator=gen, device=t.device, dtype=t.dtype) - 1))

    for _ in range(draws):
        worst = torch.maximum(worst, (model(*inputs, R=jitter) - exact).abs())
    return worst


def outside(out: torch.Tensor, ref: torch.Tensor, dtype: str, size=None, rows: bool = False,
            spread=None) -> torch.Tensor:
    """The elements of ``out`` outside ``atol * rms|ref| + rtol * |ref|`` of the float64 ``ref`` (``size``
    in place of |ref| where given, the row's rms where larger with ``rows``, twice ``spread`` added); a
    boolean mask; NaN and Inf are always outside."""
    out = out.double().to(ref.device)
    return ~torch.isfinite(out) | ~((out - ref).abs() <= _bound(ref, dtype, size, rows, spread))


def describe_mismatch(out: torch.Tensor, ref: torch.Tensor, dtype: str, size=None, rows: bool = False,
                      spread=None) -> str:
    """How many elements lie outside the elementwise bound, and the worst of them (the largest excess
    over its bound), so a failure points at its cause."""
    atol, rtol = elementwise_bounds(dtype)
    bad = outside(out, ref, dtype, size, rows, spread)
    n_bad = int(bad.sum())
    what = "|ref|" if size is None else "the size of its terms"
    rms = "rms|ref| (or its row's, if larger)" if rows else "rms|ref|"
    head = f"{n_bad} of {ref.numel()} elements outside {atol:.0e} x {rms} + {rtol:.0e} x {what}" + (
        "" if spread is None else " + 2 x the storage's spread")
    if n_bad == 0:
        return head + " (errors spread thinly over all elements: precision, not indexing)"
    out = out.double().to(ref.device)
    excess = ((out - ref).abs() - _bound(ref, dtype, size, rows, spread)).nan_to_num(math.inf, math.inf, math.inf)
    where = tuple(torch.nonzero(excess == excess.max())[0].tolist())
    return f"{head}; worst at index {where}: got {out[where].item():.6g}, want {ref[where].item():.6g}"


@contextlib.contextmanager
def poisoned_allocations():
    """Inside, every tensor PyTorch allocates without writing it (torch.empty and its kin, on any device)
    starts as NaN (integers at their largest value), so an element an implementation leaves unwritten
    fails the comparison instead of passing on whatever the memory held before.

    Freeing a NaN-filled block first poisons only a caching allocator (CUDA's); the CPU's memory goes back
    to malloc, and a fresh CPU tensor may land on zeroed pages or on a freed result that was right. So
    this asks ATen to fill every fresh allocation itself (its deterministic mode, warn_only: no operation
    is refused, and its notes on nondeterministic operations are beside the point here)."""
    was, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", r".*(deterministic|CUBLAS_WORKSPACE_CONFIG)", UserWarning)
            yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def default_device(impl) -> str:
    return "cuda" if impl.needs_cuda and torch.cuda.is_available() else "cpu"


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def check(impl, shape: dict, trials: int = 3, seed: int = 0, dist: str = "normal", device=None) -> CheckResult:
    """Run ``impl`` on ``trials`` fresh input sets at ``shape`` and compare with the float64 reference.

    Each trial passes a NaN-poisoned ``out`` (so unwritten elements fail) and requires the result to be
    that buffer; the first trial also calls without ``out`` after poisoning the allocator's free memory,
    which catches a launcher that returns ``torch.empty`` without writing it.
    """
    _check_trials(trials)
    spec = ops.get(impl.op)
    device = device or default_device(impl)
    tol = spec.tol(impl.dtype)  # the spec's own tolerance where it states one
    result = CheckResult(impl.op, impl.name, impl.dtype, shape_key(shape), dist, math.nan, tol, False, trials)
    why_not = impl.runs_on(device) or impl.outside_limits(shape)
    if why_not:
        result.reason, result.ran = f"not run: {why_not}", False
        return result
    worst = 0.0
    for t in range(trials):
        inputs = spec.inputs(shape, seed=seed + 7919 * t, device=device, dtype=impl.dtype, dist=dist)
        ref = spec.reference(*inputs)
        size = spec.magnitude(*inputs) if spec.magnitude else None
        spread = spec.storage_error(impl.dtype, ref, *inputs) if spec.storage_error else None
        try:
            args = impl.prepare(*inputs) if impl.prepare else inputs
            out = spec.empty_out(*inputs).fill_(math.nan)
            got = impl.fn(*args, out=out)
            _sync(device)
            # the first trial also calls without out= (inside the try: a kernel that raises only when it
            # allocates is a failed check like any other)
            fresh = _allocating_call(impl, args, out, device) if t == 0 else None
        except Exception as e:  # noqa: BLE001 - a raising kernel is a failed check, with its message
            result.reason = f"raised {type(e).__name__}: {e}"
            result.error = math.inf
            return result
        if not isinstance(got, torch.Tensor) or got.data_ptr() != out.data_ptr() or got.shape != out.shape:
            result.reason, result.error = "did not return the out buffer it was given", math.inf
            return result
        fresh_ok = t > 0 or (isinstance(fresh, torch.Tensor) and fresh.shape == ref.shape)
        errs = [rel_error(out, ref)] + ([] if t > 0 else [rel_error(fresh, ref) if fresh_ok else math.inf])
        err = max(errs)
        worst = max(worst, err)
        # the verdict: norm-wise, then elementwise, for the result written to out= and then the fresh one
        for y, e, called in zip((out, fresh), errs, ("", "called without out=: ")):
            why = (_verdict(y, e, ref, tol, impl.dtype, size, (spec.outliers or {}).get(impl.dtype, 0.0),
                            spec.row_scale, spread)
                   if y is out or fresh_ok else "returned no output-shaped tensor")
            if why:
                result.error, result.reason = err, called + why
                return result
    result.error, result.passed = worst, True
    return result


def _verdict(y, err, ref, tol, dtype, size=None, allowed: float = 0.0, rows: bool = False, spread=None) -> str:
    """Why ``y`` fails against ``ref`` (norm-wise error ``err`` above ``tol``, more elements outside the
    elementwise bound than the ``allowed`` fraction, an element left NaN); empty when it passes."""
    unwritten = int(torch.isnan(y).sum() - torch.isnan(ref).sum())
    if unwritten > 0:
        return f"{unwritten} of {y.numel()} output elements left unwritten (still NaN)"
    if not err <= tol:
        return f"relative error {err:.3g} > {tol:.0e}: " + describe_mismatch(y, ref, dtype, size, rows, spread)
    bad = outside(y, ref, dtype, size, rows, spread)
    if int(bad.sum()) > allowed * bad.numel() or not bool(torch.isfinite(y.double()).all()):
        return f"relative error {err:.3g} within {tol:.0e}, but " + describe_mismatch(y, ref, dtype, size, rows, spread)
    return ""


def _allocating_call(impl, args, out, device):
    """``impl`` called without ``out=``, its fresh allocations poisoned first. On CUDA, where the harness
    checks in the process it then times, a freed NaN block of the output's size does it (the caching
    allocator hands it back) and torch's global switches, which torch.compile guards on, stay as they are."""
    if device == "cuda":
        if out.numel():
            torch.full_like(out, math.nan)  # freed at once: the next allocation of this size lands on NaN
        got = impl.fn(*args)
    else:
        with poisoned_allocations():
            got = impl.fn(*args)
    _sync(device)
    return got


def _check_trials(trials) -> None:
    # no trial would leave nothing compared and the verdict vacuous: refuse rather than pass
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise MageInputError("check", "trials", f"must be a whole number of at least 1, got {trials!r}")


def check_all(impls, shapes_for=None, trials=3, dists=("normal",), device=None):
    """Check every implementation at its op's shapes (``shapes_for(op) -> list``; default: awkward)."""
    import pandas as pd
    _check_trials(trials)
    rows = []
    for impl in impls:
        spec = ops.get(impl.op)
        shapes = shapes_for(spec) if shapes_for else spec.awkward
        # shapes outside a column's stated limits (a library's documented widths) are not its failures
        for shape in [s for s in shapes if not impl.outside_limits(s)]:
            for dist in dists:
                rows.append(check(impl, shape, trials=trials, dist=dist, device=device).row())
    return pd.DataFrame(rows)
