"""Latency as a service sees it: requests whose inputs wait in host memory, served one at a time (closed
loop) or as they arrive (open loop, Poisson arrivals, a dynamic batcher), and items per second against
batch size. This module is the loops, with no GPU in it: a loop drives an
*executor* (``run(requests) -> {part: seconds}``, which serves one batch and returns when its outputs are
in host memory) against a *clock* (``now()``, ``sleep_until(t)``), so a fake clock and a fake executor
(the tests' ``service_fakes``) test it on any machine. ``mage.ext.service.gpu`` is the executor on a CUDA device and the session that
records the rows. Nothing here names an operation or an implementation: a block says how its requests
batch in its ``batch`` facet (a ``mage.ext.service.batching.Batching``).

Arrivals are simulated against the clock rather than produced by a second thread: the arrival times are
drawn before the loop starts, and a request counts as arrived once the clock has passed its time. The one
server (the device, serving one batch at a time) is the only consumer, so this is exactly the queue a
real front end would build, without a producer thread's own scheduling noise in the measurement.

The statistics and the tidy rows are in ``mage.ext.service.stats``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from mage.errors import MageInputError

WHO = "serve"
PARTS = ("h2d", "compute", "d2h")  # what an executor reports; 'other' is the rest of a batch's wall time
# Reported beside the parts, not one of them (it overlaps 'compute'): the host's own time inside the
# implementation's call (its checks and launches), so a compute tail can be told apart: kernels, or a
# host that launched them late.
HOST_CALL = "host_call"


# ------------------------------------------------------------------------------------------ arguments
def check_positive(name: str, value, whole: bool = False, allow_zero: bool = False) -> None:
    """Refuse a bad loop argument with MageInputError naming ``serve`` and the argument."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    ok = number and math.isfinite(value)
    if ok and whole:
        ok = float(value) == int(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        least = "0 or more" if allow_zero else ("at least 1" if whole else "above 0")
        raise MageInputError(WHO, name, f"must be a {'whole ' if whole else ''}number {least}, got {value!r}")


# ----------------------------------------------------------------------------------- clocks, executors
class Executor(Protocol):
    def run(self, requests: list[int]) -> dict:
        """Serve one batch (request numbers); return when its outputs are in host memory, with the
        seconds each part took ({'h2d', 'compute', 'd2h'})."""


class WallClock:
    """The host's monotonic clock. Waits sleep coarsely, then spin the last stretch: a dynamic batcher
    waits tens of microseconds, well under what ``time.sleep`` can hit."""

    now = staticmethod(time.perf_counter)

    def sleep_until(self, t: float) -> None:
        while True:
            left = t - time.perf_counter()
            if left <= 0:
                return
            if left > 2e-3:
                time.sleep(left - 1e-3)


# ---------------------------------------------------------------------------------------------- loops
@dataclass
class Trace:
    """What a loop saw, per request (seconds on the loop's clock) and per batch."""

    arrival: np.ndarray  # when the request's inputs were ready in host memory
    start: np.ndarray  # when its batch was dispatched
    end: np.ndarray  # when its batch's outputs were back in host memory
    batch: np.ndarray  # which batch served it
    sizes: list = field(default_factory=list)  # requests per batch
    parts: dict = field(default_factory=dict)  # part -> seconds per batch (h2d, compute, d2h, other)

    @property
    def latency(self) -> np.ndarray:
        return self.end - self.arrival

    @property
    def queue(self) -> np.ndarray:
        return self.start - self.arrival

    def part_per_request(self, part: str) -> np.ndarray:
        return np.asarray(self.parts[part])[self.batch]

    def throughput(self, items: int) -> float:
        """Items per second over the trace: every item served, over first arrival to last completion."""
        span = float(self.end.max() - self.arrival.min())
        return items * len(self.end) / span if span > 0 else math.inf


def _record(parts: dict, got: dict, wall: float) -> None:
    for p in PARTS:
        parts.setdefault(p, []).append(float(got.get(p, 0.0)))
    # launch work before the first copy, the synchronisation, the host's own bookkeeping
    parts.setdefault("other", []).append(wall - sum(float(got.get(p, 0.0)) for p in PARTS))
    if HOST_CALL in got:  # an executor that times its call on the host (not a part: see HOST_CALL)
        parts.setdefault(HOST_CALL, []).append(float(got[HOST_CALL]))


def closed_loop(executor: Executor, clock, requests: int, batch: int = 1) -> Trace:
    """``requests`` requests, ``batch`` at a time, each batch sent when the one before it is back: the
    latency of a lone request (batch 1) with no queue in front of it."""
    check_positive("requests", requests, whole=True)
    check_positive("batch", batch, whole=True)
    n = int(requests)
    arrival, start, end, which = (np.empty(n) for _ in range(4))
    sizes, parts = [], {}
    for b, first in enumerate(range(0, n, int(batch))):
        ids = list(range(first, min(first + int(batch), n)))
        t0 = clock.now()
        got = executor.run(ids)
        t1 = clock.now()
        arrival[ids], start[ids], end[ids], which[ids] = t0, t0, t1, b
        sizes.append(len(ids))
        _record(parts, got, t1 - t0)
    return Trace(arrival, start, end, which.astype(int), sizes, parts)


def poisson_arrivals(rate: float, requests: int, seed: int = 0) -> np.ndarray:
    """Arrival times (seconds from the start) of a Poisson process of ``rate`` requests per second."""
    check_positive("rate", rate)
    check_positive("requests", requests, whole=True)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, int(requests))
    return np.cumsum(gaps)


def open_loop(executor: Executor, clock, arrivals, max_batch: int, max_wait_us: float) -> Trace:
    """Serve requests arriving at ``arrivals`` (seconds from now, ascending) with a dynamic batcher: once
    the device is free, the oldest waiting request opens a batch, which closes when it holds
    ``max_batch`` requests or ``max_wait_us`` after that request arrived, whichever comes first (at
    once, if that moment has passed while the device was busy). Latency is completion less arrival, so
    the queue is part of it."""
    check_positive("max_batch", max_batch, whole=True)
    check_positive("max_wait_us", max_wait_us, allow_zero=True)
    a = np.asarray(arrivals, dtype=float)
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(np.diff(a) < 0) or a[0] < 0:
        raise MageInputError(WHO, "arrivals", "must be a non-empty ascending sequence of times from 0 on")
    B, D, n = int(max_batch), float(max_wait_us) * 1e-6, a.size
    t0 = clock.now()
    at = t0 + a
    start, end, which = np.empty(n), np.empty(n), np.empty(n, dtype=int)
    sizes, parts = [], {}
    i = 0
    while i < n:
        # the batch opened by request i closes when its B-th request arrives or D after request i
        close = min(at[i] + D, at[i + B - 1] if i + B - 1 < n else math.inf)
        clock.sleep_until(close)
        now = clock.now()
        k = i + int(np.searchsorted(at[i:min(i + B, n)], now, side="right"))
        k = max(k, i + 1)  # request i has arrived: close >= at[i], and clocks do not run backwards
        ids = list(range(i, k))
        got = executor.run(ids)
        done = clock.now()
        start[i:k], end[i:k], which[i:k] = now, done, len(sizes)
        sizes.append(k - i)
        _record(parts, got, done - now)
        i = k
    return Trace(at, start, end, which, sizes, parts)


class MemoryLimit(Exception):
    """Raised by an executor factory when a batch of this size does not fit."""


def batch_sizes(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit`` (and ``limit`` itself when it is not a power of two)."""
    check_positive("max_batch", limit, whole=True)
    out = [1 << k for k in range(int(limit).bit_length()) if 1 << k <= limit]
    return out if out[-1] == limit else [*out, int(limit)]


def batch_sweep(make_executor: Callable[[int], Executor], clock, limit: int, reps: int = 20,
                warmup: int = 3) -> list[dict]:
    """Requests per second (end to end, outputs back in host memory) for batches of 1, 2, 4, ... up to
    ``limit`` or until a batch no longer fits (``MemoryLimit``): [{batch, seconds, parts, fits}]."""
    check_positive("reps", reps, whole=True)
    out = []
    for b in batch_sizes(limit):
        try:
            ex = make_executor(b)
        except MemoryLimit:
            out.append({"batch": b, "fits": False})
            break
        ids = list(range(b))
        for _ in range(warmup):
            ex.run(ids)
        parts = {}
        t0 = clock.now()
        for _ in range(int(reps)):
            t = clock.now()
            got = ex.run(ids)
            _record(parts, got, clock.now() - t)
        total = clock.now() - t0
        out.append({"batch": b, "fits": True, "seconds": total / reps, "requests_per_s": b * reps / total,
                    "parts": {p: float(np.mean(v)) for p, v in parts.items() if p != HOST_CALL}})
        del ex
    return out
