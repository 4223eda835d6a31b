"""Correctness against the float64 reference: fresh seeded inputs, outputs poisoned with NaN, a verdict
with reasons. ``check`` never raises for a failing implementation, so tests, notebooks and logs all use it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from . import ops
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


def describe_mismatch(out: torch.Tensor, ref: torch.Tensor, tol: float) -> str:
    """How many elements differ and where: the worst one, so a failure points at its cause."""
    out = out.double().to(ref.device)
    scale = float(ref.abs().mean()) or 1.0
    bad = ~torch.isfinite(out) | ((out - ref).abs() > tol * 10 * scale)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return "errors spread thinly over all elements (precision, not indexing)"
    where = torch.nonzero(bad)[0].tolist()
    return (f"{n_bad} of {ref.numel()} elements off by more than {tol * 10:.0e} x mean|ref|; first at "
            f"index {tuple(where)}: got {out[tuple(where)].item():.6g}, want {ref[tuple(where)].item():.6g}")


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
    why_not = impl.runs_on(device)
    if why_not:
        result.reason, result.ran = f"not run: {why_not}", False
        return result
    worst = 0.0
    for t in range(trials):
        inputs = spec.inputs(shape, seed=seed + 7919 * t, device=device, dtype=impl.dtype, dist=dist)
        ref = spec.reference(*inputs)
        try:
            args = impl.prepare(*inputs) if impl.prepare else inputs
            out = spec.empty_out(*inputs).fill_(math.nan)
            got = impl.fn(*args, out=out)
            _sync(device)
            # the first trial also calls without out= (inside the try: a kernel that raises only when it
            # allocates is a failed check like any other)
            alloc_err = _allocating_call_error(impl, args, out, ref, device) if t == 0 else 0.0
        except Exception as e:  # noqa: BLE001 - a raising kernel is a failed check, with its message
            result.reason = f"raised {type(e).__name__}: {e}"
            result.error = math.inf
            return result
        if not isinstance(got, torch.Tensor) or got.data_ptr() != out.data_ptr() or got.shape != out.shape:
            result.reason, result.error = "did not return the out buffer it was given", math.inf
            return result
        unwritten = int(torch.isnan(out).sum() - torch.isnan(ref).sum())
        if unwritten > 0:
            result.reason = f"{unwritten} of {out.numel()} output elements left unwritten (still NaN)"
            result.error = math.inf
            return result
        err = max(rel_error(out, ref), alloc_err)
        worst = max(worst, err)
        if not err <= tol:
            result.error = err
            result.reason = f"relative error {err:.3g} > {tol:.0e}: " + describe_mismatch(out, ref, tol)
            return result
    result.error, result.passed = worst, True
    return result


def _allocating_call_error(impl, args, out, ref, device) -> float:
    if device == "cuda" and out.numel():
        torch.full_like(out, math.nan)  # freed at once: the next allocation of this size lands on NaN
    got = impl.fn(*args)
    _sync(device)
    return rel_error(got, ref) if isinstance(got, torch.Tensor) and got.shape == ref.shape else math.inf


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
        for shape in shapes:
            for dist in dists:
                rows.append(check(impl, shape, trials=trials, dist=dist, device=device).row())
    return pd.DataFrame(rows)
