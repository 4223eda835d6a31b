"""The rows written from raw spans: event spans per round and overall, host times, and the flags the
spans show (launch bound, drift, untracked work). The same for spans the harness took itself and for
spans an implementation took in its own process (``Impl.own_spans``)."""
from __future__ import annotations

import json
import math
import statistics

from .env import clock_warnings, clocks
from .timing import SpanPlan, SpanRounds, summarize


def own_rows(own_ok, probe, shape, shape_set, st, row, log, spec, key, kernel):
    """The rows of the implementations that take their spans in their own process (forward only)."""
    rows = []
    plan = SpanPlan.make(st.spans, st.rounds, st.block, st.warmup, st.warm_s)
    for im in own_ok:
        before = clocks()
        try:
            got = im.own_spans(probe, shape, shape_set, plan, st.graph)  # the inputs the others ran on
        except Exception as e:  # noqa: BLE001 - an optional path; the log says why it is absent
            log(f"  {im.name} skipped for {spec.name} {key}: {type(e).__name__}: {e}")
            continue
        after = clocks()
        own_sp = SpanRounds({im.name: got["spans_us"]}, [[im.name]] * plan.rounds,
                            {im.name: got.get("host_us") or [[] for _ in range(plan.rounds)]}, list(plan.blocks))
        rows += _span_rows(im, own_sp, kernel.get(im.kernels_of), clock_warnings([before, after]), lambda r: [before, after], row,
                           kernel_names=got.get("kernel_names", ""))
        if got.get("graph_us") is not None:
            rows.append(row(im, "graph_span", float(got["graph_us"]), "us"))
    return rows


def _span_rows(im, sp, p, round_flags, window, row, kernel_names=None):
    """The event_span and host_time rows of one implementation, from its raw spans."""
    rows, name = [], im.name
    per_round = sp.samples[name]
    names = "|".join(p.kernel_names) if p else (kernel_names or "")
    for r, samples in enumerate(per_round, start=1):
        s = summarize(samples)
        extra = {"order": ">".join(sp.orders[r - 1]),
                 "clocks": json.dumps(window(r - 1), sort_keys=True),
                 "flags": ";".join(round_flags + ([f"outliers:{s['outliers']}"] if s["outliers"] else []))}
        for stat in ("n", "mean", "median", "p20", "p80", "min"):
            rows.append(row(im, "event_span", s[stat], "us", rnd=r, stat=stat, **extra))
    host = sp.host_means(name)
    for r, h in enumerate(host, start=1):
        if not math.isnan(h):  # a round without host times writes no row; the others keep their numbers
            rows.append(row(im, "host_time", h, "us", rnd=r, order=">".join(sp.orders[r - 1])))
    host = [h for h in host if not math.isnan(h)]
    whole = summarize([x for r in per_round for x in r])
    flags = list(round_flags)
    if p is not None and p.kernel_us > 1.02 * whole["mean"]:
        flags.append("untracked_work")  # kernel time above the span: work outside the measured call?
    if p is not None and whole["mean"] > 2 * p.kernel_us:
        flags.append("launch_bound")
    # The rounds are interleaved over the window, so drift shows in time order, not between rounds:
    # thirds of the window whose span medians differ by > 3%, and whether the host's time did it.
    def moved(seg):  # range of the thirds' medians, as a share of the span's median
        return (max(seg) - min(seg)) / whole["median"] if seg else 0.0
    drift, host_drift = moved(sp.segment_medians(name)), moved(sp.segment_medians(name, host=True))
    if drift > 0.03:
        flags.append(f"span_drift:{100 * drift:.1f}%")
    if host_drift > 0.03:
        flags.append("host_speed_moved")  # the host's time in the call moved by > 3% of the span
    if host:
        rows.append(row(im, "host_time", statistics.fmean(host), "us"))
    for stat in ("n", "mean", "median", "p10", "p90", "min", "max"):
        rows.append(row(im, "event_span", whole[stat], "us", stat=stat, flags=";".join(flags), kernel_names=names))
    return rows
