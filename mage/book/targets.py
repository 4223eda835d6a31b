"""The speed targets the operations state (their ``targets`` facets), evaluated against a data
directory, and the harness's own precision.

Every number comes from the recorded rows (by default kernel time, warm; at the large shapes one input
set already overflows L2, so warm is cold there) at the target's own shape set, and from the ceilings
of the run that recorded the row. A target the data cannot answer reads "not measured" and is not met.
``python -m mage targets data/h200`` prints the table.
"""
from __future__ import annotations

import math

import pandas as pd

from mage import facets
from mage import views as V
from mage.book.target import Target
from mage.data import load, load_ceilings
from mage.ops import OPS, PRECISIONS, shape_key

WHAT = {"kernel_time": "kernel time", "event_span": "event span", "graph_span": "graph-replay span"}


def _describe(op: str, t: Target, shape: str) -> tuple[str, str]:
    """(what is measured, what is wanted), in words."""
    where = f"{t.impl} {op} {t.shape_set} {shape}"
    if t.dtype != "fp32":
        where += f" {t.dtype}"
    if t.measure == "speedup":
        view = WHAT.get(t.view, t.view)
        base = f"{t.baseline} {t.baseline_dtype}" if t.baseline_dtype else t.baseline
        return f"{where}: {base} {view} / {t.impl} {view}", f">= {t.wanted:.2f}"
    if t.measure == "share_of_copy":
        return f"{where}: share of copy bandwidth", f">= {t.wanted:.2f}"
    return f"{where}: share of the {t.dtype} dense-product rate", f">= {t.wanted:.2f}"


def evaluate(df: pd.DataFrame, ceil: pd.DataFrame, op: str, t: Target) -> list[dict]:
    """One row per shape the target covers (its ``shape``, or every listed shape of its set)."""
    shapes = [shape_key(t.shape)] if t.shape else V.shapes_of(op, t.shape_set)
    rows = []
    for shape in shapes:
        where = dict(shape_set=t.shape_set, cache="warm", dtype=t.dtype, shape=shape)
        ours = V.case(df, op, t.impl, t.view, **where)
        measured = math.nan
        if ours is not None and ours["value"] > 0:
            seconds = float(ours["value"]) * 1e-6
            if t.measure == "speedup":
                base = dict(where, dtype=t.baseline_dtype or t.dtype)
                measured = V.value(df, op, t.baseline, t.view, **base) / float(ours["value"])
            elif t.measure == "share_of_copy":
                measured = float(ours["bytes"]) / seconds / 1e9 / V.ceiling(ceil, "copy_gbps", ours["run"])
            elif t.measure == "share_of_rate":
                measured = float(ours["flops"]) / seconds / 1e12 / V.ceiling(ceil, PRECISIONS[t.dtype].rate, ours["run"]) * PRECISIONS[t.dtype].products
            else:
                raise ValueError(f"{op}: target measure {t.measure!r} is not one of speedup, share_of_copy, "
                                 "share_of_rate")
        what, wanted = _describe(op, t, shape)
        rows.append(dict(target=what, op=op, impl=t.impl, dtype=t.dtype, shape_set=t.shape_set, shape=shape,
                         measured=measured,
                         unit="", wanted=wanted, met=bool(math.isfinite(measured) and measured >= t.wanted)))
    return rows


def targets(path, df: pd.DataFrame | None = None, ceilings: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every target of every spec, evaluated against the data in ``path`` (or the frames given)."""
    df = load(path) if df is None else df
    ceil = load_ceilings(path) if ceilings is None else ceilings
    rows = [r for op in OPS for t in facets.get(op, "targets", ()) for r in evaluate(df, ceil, op, t)]
    cols = ["target", "op", "impl", "dtype", "shape_set", "shape", "measured", "unit", "wanted", "met"]
    out = pd.DataFrame(rows, columns=cols)
    out["met"] = out["met"].astype(bool)
    return out


def markdown(t: pd.DataFrame) -> str:
    lines = ["| target | measured | wanted | met |", "|---|---|---|---|"]
    for r in t.itertuples():
        m = f"{r.measured:.2f}" if isinstance(r.measured, float) and math.isfinite(r.measured) else "not measured"
        m += f" {r.unit}" if r.unit else ""
        lines.append(f"| {r.target} | {m} | {r.wanted} | {'yes' if r.met else 'no'} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the harness's precision
def precision(df: pd.DataFrame, shape_set: str = "large", cache: str = "warm") -> pd.DataFrame:
    """The harness's own precision: per (op, impl, dtype, shape), how far the round means of event_span
    lie from their mean (the largest deviation, as a share of the mean: ``views.spread``), and the same
    for span minus the host's time inside the call, which removes what the host's speed contributes.
    ``drift``: how far the spans moved over the window in time order (range of the thirds' medians over
    the median) where the run flagged it (over 3%); NaN where it did not, or computed none (an
    implementation that reports rounds only, and windows too short to cut in thirds)."""
    d = V.select(df, shape_set=shape_set, cache=cache, stat="mean")
    key = ["op", "impl", "dtype", "shape"]
    rounds = d[d["round"] > 0]
    span = V.select(rounds, view="event_span").set_index(key + ["round"])["value"]
    host = V.select(rounds, view="host_time").set_index(key + ["round"])["value"]
    overall = V.select(d, view="event_span", round=0).set_index(key)
    flags = overall["flags"].fillna("").astype(str) if "flags" in overall else pd.Series("", index=overall.index)
    drift = flags.str.extract(r"span_drift:([0-9.]+)%", expand=False).astype(float) / 100
    out = []
    for k, s in span.groupby(level=key):
        h = host.reindex(s.index)
        full = bool(h.notna().all())
        out.append(dict(zip(key, k), rounds=len(s), span_dev=V.spread(s.values),
                        host_dev=float((h.max() - h.min()) / s.mean()) if full else math.nan,
                        rest_dev=V.spread((s - h).values) if full else math.nan,
                        drift=float(drift.get(k, math.nan))))
    return pd.DataFrame(out, columns=key + ["rounds", "span_dev", "host_dev", "rest_dev", "drift"])


def precision_all(df: pd.DataFrame) -> pd.DataFrame:
    """``precision`` for every shape set measured in rounds (not the tile sweep, whose rows differ by
    config) in both cache modes, with shape set and cache as columns."""
    sets = [s for s in ("field", "large", "sweep") if s in set(df["shape_set"])]
    parts = [precision(df, ss, c).assign(shape_set=ss, cache=c) for ss in sets for c in ("warm", "cold")]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else precision(df).assign(shape_set=[], cache=[])


def precision_summary(df: pd.DataFrame, tol: float = V.PRECISION) -> str:
    a = precision_all(df)
    p = V.select(a, shape_set="large", cache="warm")
    if p.empty:
        return "no large-shape event spans with rounds"
    within = int((p["span_dev"] <= tol).sum())
    worst = p.sort_values("span_dev").iloc[-1]
    line = (f"large shapes, warm: {within} of {len(p)} event-span rows have every round mean within "
            f"{tol:.0%} of their mean; worst {worst.span_dev:.1%} ({worst['op']} {worst['impl']} {worst['dtype']})")
    if p["rest_dev"].notna().any():
        line += (f"; span minus host time: {int((p['rest_dev'] <= tol).sum())} of {int(p['rest_dev'].notna().sum())}"
                 f" within, worst {p['rest_dev'].max():.1%}")
    moved = a[a["drift"].notna()]
    line += f". All shape sets: {int((a['span_dev'] <= tol).sum())} of {len(a)} rows within; "
    line += (f"{len(moved)} drifted by over {tol:.0%} in time order (worst {moved['drift'].max():.1%}), and of those"
             f" {int((moved['span_dev'] <= tol).sum())} still have round means within {tol:.0%}") if len(moved) else \
        f"none drifted by over {tol:.0%} in time order"
    return line
