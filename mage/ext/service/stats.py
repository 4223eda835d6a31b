"""The service experiment's statistics and its tidy rows (``mage.data``'s schema), from the traces that
``mage.ext.service.loops``'s loops return.

Percentiles are nearest-rank: the p-th percentile of n latencies is the ceil(p/100 * n)-th smallest,
computed exactly (p taken as the decimal it is written as). Every reported percentile is then a latency
some request really had, and the tail (p99.9 of 2000 requests: the 1998th smallest) is not an
interpolation between two samples. It equals numpy's ``method="inverted_cdf"`` except where p/100 * n is
a whole number and numpy's floating-point product lands just above it (numpy then gives the next rank).
"""
from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np

from mage.errors import MageInputError

from .loops import HOST_CALL, PARTS, WHO

STATS = {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9, "max": 100}
PART_STATS = {"mean": None, "p50": 50, "p99": 99}
US = 1e6


def percentile(samples, q: float) -> float:
    """Nearest-rank percentile (see the module docstring): the ceil(q/100 * n)-th smallest sample."""
    xs = np.sort(np.asarray(samples, dtype=float).ravel())
    if xs.size == 0:
        raise MageInputError(WHO, "samples", "must hold at least one value")
    if not isinstance(q, (int, float)) or not 0 <= q <= 100:
        raise MageInputError(WHO, "q", f"must be a number in [0, 100], got {q!r}")
    rank = math.ceil(Fraction(str(q)) * xs.size / 100)
    return float(xs[max(rank, 1) - 1])


def summary(samples) -> dict:
    """{p50, p90, p99, p999, max, mean} of ``samples``."""
    out = {name: percentile(samples, q) for name, q in STATS.items()}
    out["mean"] = float(np.mean(samples))
    return out


def base_row(op: str, impl: str, dtype: str, shape: str, run: str, host_mem: str, family: str = "") -> dict:
    """The columns every row of one case shares: a request's shape, no cache mode, one round; every
    identity column present (blank where it does not apply), so rows of any loop merge into one file."""
    return dict(op=op, impl=impl, dtype=dtype, shape=shape, shape_set="service", cache="n/a", round=0, run=run,
                family=family, host_mem=host_mem, config="", tile_of="", stage="", loop="", batch=None,
                wait_us=None, load=None, rate=None, batch_size=None)


def _row(base, view, stat, value, unit, **kw) -> dict:
    return dict(base, view=view, stat=stat, value=float(value), unit=unit, **kw)


def _part_stat(xs, q) -> float:
    """PART_STATS' statistic: the mean for None, else the nearest-rank percentile q."""
    return float(np.mean(xs)) if q is None else percentile(xs, q)


def trace_rows(trace, base: dict, loop: str, items: int, **case) -> list[dict]:
    """The rows of one loop's trace: latency percentiles; each part (h2d, compute, d2h, other, and the
    queue in an open loop) per request, with its share of the mean latency; the host's time inside the
    call (view ``host_call``) where the executor timed it; the achieved throughput in
    items per second; requests served; the batch-size histogram. ``case``: batch, wait_us, load, rate."""
    b = dict(base, loop=loop, **case)
    lat = trace.latency
    rows = [_row(b, "latency", k, v * US, "us") for k, v in summary(lat).items()]
    parts = {p: trace.part_per_request(p) for p in (*PARTS, "other")}
    if loop == "open":
        parts["queue"] = trace.queue
    mean = float(np.mean(lat))
    for name, xs in parts.items():
        for stat, q in PART_STATS.items():
            rows.append(_row(b, "latency_part", stat, _part_stat(xs, q) * US, "us", stage=name))
        rows.append(_row(b, "latency_share", "mean", float(np.mean(xs)) / mean if mean > 0 else math.nan,
                         "fraction", stage=name))
    if HOST_CALL in trace.parts:  # the host's time inside the call: beside the parts, not one of them
        xs = trace.part_per_request(HOST_CALL)
        for stat, q in PART_STATS.items():
            rows.append(_row(b, HOST_CALL, stat, _part_stat(xs, q) * US, "us"))
    rows.append(_row(b, "throughput", "achieved", trace.throughput(items), "items/s"))
    rows.append(_row(b, "requests", "served", len(lat), "count"))
    for size, count in sorted(Counter(trace.sizes).items()):
        rows.append(_row(b, "batch_hist", "count", count, "batches", batch_size=size))
    return rows


def sweep_rows(sweep: list[dict], base: dict, items: int) -> list[dict]:
    """Rows of a batch sweep: per batch size, items per second end to end and the time of one batch,
    split into its parts."""
    rows = []
    for r in sweep:
        if not r.get("fits"):
            continue
        b = dict(base, loop="batch_sweep", batch=r["batch"])
        rows.append(_row(b, "throughput", "mean", r["requests_per_s"] * items, "items/s"))
        rows.append(_row(b, "latency", "mean", r["seconds"] * US, "us"))
        for name, v in r["parts"].items():
            rows.append(_row(b, "latency_part", "mean", v * US, "us", stage=name))
            rows.append(_row(b, "latency_share", "mean", v / r["seconds"] if r["seconds"] > 0 else math.nan,
                             "fraction", stage=name))
    return rows


def peak_requests_per_s(sweep: list[dict], max_batch: int) -> float:
    """The highest request rate the sweep reached with batches of at most ``max_batch``: the capacity
    an open loop with that batcher can be offered a share of."""
    got = [r["requests_per_s"] for r in sweep if r.get("fits") and r["batch"] <= max_batch]
    if not got:
        raise MageInputError(WHO, "max_batch", f"no batch of at most {max_batch} requests fitted in memory")
    return max(got)
