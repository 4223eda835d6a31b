"""Event spans around whole calls (the launch path included) and CUDA-graph replay (launch path removed).

Spans start on an idle GPU (a synchronisation before each), so host-side launch work shows up in the
span exactly as a user calling from Python sees it. The host's wall-clock time inside each call is kept
beside the span: on a shared machine the host's speed can change by 2x for seconds at a time, and
then the span moves with it while span minus host time does not.

The implementations take turns span by span (a, b, c, a, b, c, ...), so all of them see the same host
and GPU conditions. Rounds rotate who goes first, and they are taken in short blocks, back and forth
(round 1, 2, 3, 3, 2, 1, 1, 2, 3, ...), so every round samples the whole measuring window and a steady
trend falls on all rounds alike. The spread of the round means then says how far interleaved estimates
of one mean disagree; it does not say how the machine moved during the window. That is reported
apart: ``segment_medians`` gives the medians over consecutive thirds of the window, in time order.
"""
from __future__ import annotations

import gc
import json
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch


def rotation(names: list[str], rounds: int) -> list[list[str]]:
    """Round r measures the implementations starting from the r-th: every one goes first once in three."""
    n = len(names)
    return [names[r % n:] + names[: r % n] for r in range(rounds)] if n else [[] for _ in range(rounds)]


def _quantile(sorted_xs, q):
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples: list[float]) -> dict:
    """The statistics kept for a set of spans (raw spans are summarised, never dropped)."""
    xs = sorted(samples)
    q1, q3 = _quantile(xs, 0.25), _quantile(xs, 0.75)
    fence = q3 + 3.0 * (q3 - q1)
    return {"n": len(xs), "mean": statistics.fmean(xs), "median": _quantile(xs, 0.5),
            "p10": _quantile(xs, 0.1), "p20": _quantile(xs, 0.2), "p80": _quantile(xs, 0.8),
            "p90": _quantile(xs, 0.9), "min": xs[0], "max": xs[-1],
            # flagged, not removed: a span far above the upper quartile (an interrupt, a clock change)
            "outliers": sum(x > fence for x in xs)}


class EventTimer:
    """Times one call with CUDA events on an idle GPU; returns microseconds. ``last_host_us`` is the
    host's wall-clock time inside that call (Python, validation, the launch API)."""

    def __init__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.last_host_us = float("nan")

    def __call__(self, fn: Callable) -> float:
        torch.cuda.synchronize()
        self.start.record()
        t0 = time.perf_counter()
        fn()
        self.last_host_us = (time.perf_counter() - t0) * 1e6
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3


def schedule(rounds: int, per_round: int, block: int) -> list[tuple[int, int]]:
    """The blocks in the order they run, as (round index, passes): each round's passes cut into blocks
    of ``block``, the rounds' blocks taken forwards then backwards (0, 1, 2, 2, 1, 0, ...), so each
    round is spread over the whole window and none is always the earliest of a cycle."""
    block = max(1, block)
    left = [per_round] * rounds
    out = []
    cycle = 0
    while any(left):
        order = range(rounds) if cycle % 2 == 0 else range(rounds - 1, -1, -1)
        cycle += 1
        for r in order:
            if left[r]:
                k = min(block, left[r])
                out.append((r, k))
                left[r] -= k
    return out


@dataclass(frozen=True)
class SpanPlan:
    """The span protocol of one case, decided once here; whoever takes the spans (this module, or an
    implementation that times itself in its own process) executes it as given and returns raw spans.

    Warm each implementation (``warmup`` calls and at least ``warm_s`` seconds), take ``lead_in``
    untimed passes in the timed rhythm, then run ``blocks`` in order: a block (r, k) is k passes of
    round r, one span of each implementation per pass."""

    rounds: int
    per_round: int
    block: int
    warmup: int
    warm_s: float
    lead_in: int
    blocks: tuple  # ((round index, passes), ...) in time order, from ``schedule``

    @staticmethod
    def make(n: int = 300, rounds: int = 3, block: int = 10, warmup: int = 10, warm_s: float = 0.0) -> "SpanPlan":
        rounds = max(1, rounds)
        per_round = max(1, n // rounds)
        blocks = tuple(schedule(rounds, per_round, block))
        return SpanPlan(rounds, per_round, max(1, block), warmup, warm_s, min(max(1, block), per_round), blocks)

    def to_json(self) -> str:
        return json.dumps(dict(rounds=self.rounds, per_round=self.per_round, block=self.block,
                               warmup=self.warmup, warm_s=self.warm_s, lead_in=self.lead_in,
                               blocks=[list(b) for b in self.blocks]), sort_keys=True)

    def round_sequence(self) -> list[int]:
        """The round of every timed pass, in time order: what an executor must reproduce."""
        return [r for r, k in self.blocks for _ in range(k)]


@dataclass
class SpanRounds:
    samples: dict  # name -> list (one per round) of lists of spans in us
    orders: list  # the order of names in each pass of each round
    host: dict  # name -> list (one per round) of lists of host times in us (empty when the timer has none)
    blocks: list  # (round index, passes) of each block, in time order (see ``schedule``)

    def round_means(self, name) -> list[float]:
        return [statistics.fmean(r) for r in self.samples[name]]

    def host_means(self, name) -> list[float]:
        return [statistics.fmean(r) if r else math.nan for r in self.host.get(name, [])]

    def round_window(self, r: int) -> tuple[int, int]:
        """Indices of the ``between`` readings taken before round ``r``'s first block and after its last."""
        idx = [i for i, (b, _) in enumerate(self.blocks) if b == r]
        return idx[0], idx[-1] + 1

    def in_time_order(self, name, host: bool = False) -> list[float]:
        """One implementation's spans (or host times) in the order they were taken."""
        src = self.host.get(name, []) if host else self.samples[name]
        if not any(src):
            return []
        taken = [0] * len(src)
        out = []
        for r, k in self.blocks:
            out += src[r][taken[r]: taken[r] + k]
            taken[r] += k
        return out

    def segment_medians(self, name, host: bool = False, segments: int = 3, least: int = 30) -> list[float]:
        """Medians over ``segments`` consecutive stretches of the window, in time order: how far the
        conditions drifted while the spans were taken. Medians, so that a few slow spans (flagged as
        outliers already) do not read as drift; empty when a stretch would hold fewer than ``least``."""
        xs = self.in_time_order(name, host)
        if len(xs) < segments * least:
            return []
        cut = [round(i * len(xs) / segments) for i in range(segments + 1)]
        return [statistics.median(xs[a:b]) for a, b in zip(cut, cut[1:])]


def spans(calls: dict[str, Callable], n: int = 300, rounds: int = 3, warmup: int = 10,
          timer: Callable | None = None, between: Callable | None = None, warm_s: float = 0.0,
          block: int = 10, plan: SpanPlan | None = None) -> SpanRounds:
    """``n`` warmed spans per implementation, split over ``rounds`` with rotated order; or, given a
    ``plan``, exactly what the plan says (the other protocol arguments are then ignored).

    First every implementation is warmed (at least ``warmup`` calls and ``warm_s`` seconds each: a GPU
    under its power limit settles its clock over tens of milliseconds of sustained work), then all take
    ``block`` untimed turns in the timed rhythm: without them the first timed block found the first
    implementation idle since its own warm-up, and round 1 read high in most rows. Then the blocks of
    ``schedule`` run back to back; a block of round r is ``block`` passes, one span of each
    implementation per pass, in round r's order. ``timer(fn) -> us`` is injectable (tests use a fake);
    its ``last_host_us``, when it has one, is kept per span. ``between(r)`` runs before each block
    (r: its round, from 1) and once after the last (r = 0), outside every span: the harness reads
    clocks there. The garbage collector is off during the spans, as ``timeit`` does: a collection
    would land inside some call's span.
    """
    timer = timer or EventTimer()
    names = list(calls)
    plan = plan or SpanPlan.make(n, rounds, block, warmup, warm_s)
    rounds, blocks = plan.rounds, list(plan.blocks)
    orders = rotation(names, rounds)
    samples = {name: [[] for _ in range(rounds)] for name in names}
    host = {name: [[] for _ in range(rounds)] for name in names}
    for name in orders[0]:
        _warm(calls[name], plan.warmup, plan.warm_s)
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(plan.lead_in):
            for name in orders[0]:
                timer(calls[name])  # the lead-in: same rhythm as the spans, not kept
        for r, passes in blocks:
            if between:
                between(r + 1)
            for _ in range(passes):
                for name in orders[r]:
                    samples[name][r].append(timer(calls[name]))
                    h = getattr(timer, "last_host_us", None)
                    if h is not None:
                        host[name][r].append(h)
    finally:
        if collecting:
            gc.enable()
    if between:
        between(0)
    return SpanRounds(samples, orders, host, blocks)


def _warm(fn: Callable, calls: int, seconds: float) -> None:
    t0, k = time.perf_counter(), 0
    while k < calls or time.perf_counter() - t0 < seconds:
        fn()
        k += 1
        if seconds:
            _sync()  # so the wall clock counts GPU work, not how fast launches queue


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def graph_span(calls: list[Callable], replays: int = 20, repeat: int = 10, stream=None) -> float:
    """Microseconds per call when ``calls`` (run ``repeat`` times in order) are captured in one CUDA graph
    and replayed: launch overhead is gone, what remains is GPU work plus the gaps between kernels.
    ``stream``: the stream to warm and capture on (default a new one). A backward runs on the stream its
    forward ran on, so a backward alone is captured on the stream its forward was run on."""
    stream = stream or torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm on the capture stream, as capture requires
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(repeat):
            for fn in calls:
                fn()
    graph.replay()
    torch.cuda.synchronize()
    timer = EventTimer()
    per_replay = sorted(timer(graph.replay) for _ in range(replays))
    return _quantile(per_replay, 0.5) / (repeat * len(calls))
