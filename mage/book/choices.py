"""Structural choices beyond tile sizes, as tables the pages show.

Precision: one operation's implementations at every precision it was measured in, side by side: kernel
time, the rate reached against that precision's own ceiling, the error against the float64 reference
from the checks, and how many significand bits of each operand the products keep. Layout: the best
kernel time the tile sweep found for each value of the config keys that choose a data layout.

Names no operation: the pages pass one in. Every comparison goes through ``views.judge`` with the
harness's tolerance, so a sentence built here never says 'faster' for a difference the harness cannot see.
"""
from __future__ import annotations

import math

import pandas as pd

from mage import views as V
from mage.book import claims as C
from mage.ops import PRECISIONS, peak_tflops

# Significand bits of one operand that a product keeps (the implicit leading bit included): FP32 24;
# TF32 and bf16 keep 11 and 8 (10 and 7 stored); fp32x3 splits each operand into a TF32 head and a TF32
# remainder, so an operand is carried by 11 + 11 bits and the dropped lo*lo product sits below FP32's
# own rounding. Facts of the formats, not measurements.
BITS = {"fp32": 24, "fp32x3": 22, "tf32": 11, "bf16": 8}

COLUMNS = ["implementation", "precision", "kernel time (µs)", "TFLOP/s", "share of the precision's peak",
           "error against float64", "tolerance", "bits kept"]


def errors(checks: pd.DataFrame, op: str, impl: str, dtype: str, shape: str) -> tuple[float, str]:
    """The largest relative error any check of ``impl`` at ``dtype`` recorded at ``shape`` (over the
    input distributions), else at the largest shape it was checked at; (NaN, '') when never checked."""
    if checks is None or checks.empty:
        return math.nan, ""
    c = checks[(checks["op"] == op) & (checks["impl"] == impl) & (checks["dtype"] == dtype)]
    c = c[c["ran"].astype(str).str.lower().isin(["true", "1"])] if "ran" in c else c
    c = c.dropna(subset=["error"])
    if c.empty:
        return math.nan, ""
    at = c[c["shape"] == shape]
    if at.empty:  # checked at another shape only: report the largest one, and say which
        sizes = c["shape"].map(lambda s: math.prod(int(p.split("=")[1]) for p in s.split(",")))
        at = c[c["shape"] == c.loc[sizes.idxmax(), "shape"]]
    return float(at["error"].astype(float).max()), str(at["shape"].iloc[0])


def table(df: pd.DataFrame, checks: pd.DataFrame, ceilings: pd.DataFrame, op: str, shape_set: str = "large",
          cache: str = "warm", label=str) -> tuple[pd.DataFrame, str]:
    """(table, shape): every (implementation, precision) measured at the op's first ``shape_set`` shape,
    fastest first within a precision. ``label`` turns an implementation name into words."""
    shape = V.first_shape(df, op, shape_set)
    d = V.headline(df, op=op, shape_set=shape_set, cache=cache, view="kernel_time", shape=shape)
    rows = []
    for _, r in d.iterrows():
        dtype = str(r["dtype"])
        if dtype not in PRECISIONS:
            continue
        tflops = float(r["flops"]) / (float(r["value"]) * 1e6) if r["value"] > 0 else math.nan
        peak = _peak(ceilings, dtype, r.get("run"))
        err, _ = errors(checks, op, str(r["impl"]), dtype, shape)
        rows.append({"implementation": label(r["impl"]), "precision": dtype, "kernel time (µs)": float(r["value"]),
                     "TFLOP/s": tflops, "share of the precision's peak": tflops / peak if peak else math.nan,
                     "error against float64": err, "tolerance": PRECISIONS[dtype].tolerance,
                     "bits kept": BITS.get(dtype), "_rank": list(PRECISIONS).index(dtype)})
    t = pd.DataFrame(rows, columns=COLUMNS + ["_rank"])
    return t.sort_values(["_rank", "kernel time (µs)"]).drop(columns="_rank").reset_index(drop=True), shape


def _peak(ceilings: pd.DataFrame, dtype: str, run) -> float:
    """The precision's ceiling in the row's own run (the newest reading when that run measured none)."""
    if ceilings is None or ceilings.empty:
        return math.nan
    rate = PRECISIONS[dtype].rate
    v = V.ceiling(ceilings, rate, run=run)  # falls back to the newest reading itself
    return peak_tflops({rate: v}, dtype)


def against(df: pd.DataFrame, op: str, impl: str, dtype: str, base_impl: str, base_dtype: str,
            shape_set: str = "large", cache: str = "warm") -> V.Comparison:
    """``impl`` at ``dtype`` against ``base_impl`` at ``base_dtype`` in kernel time at the first
    ``shape_set`` shape, a tie within the harness's precision widened to the two rows' spreads."""
    shape = V.first_shape(df, op, shape_set)
    ra = V.case(df, op, impl, shape_set=shape_set, cache=cache, dtype=dtype, shape=shape)
    rb = V.case(df, op, base_impl, shape_set=shape_set, cache=cache, dtype=base_dtype, shape=shape)
    va = float(ra["value"]) if ra is not None else math.nan
    vb = float(rb["value"]) if rb is not None else math.nan
    tol = V.tie_tolerance(*(float(r["spread"]) for r in (ra, rb) if r is not None))
    return V.judge(va, vb, tol)


def sentence(df: pd.DataFrame, checks: pd.DataFrame, op: str, impl: str, dtype: str, base_impl: str,
             base_dtype: str, label=str, shape_set: str = "large") -> str:
    """One computed sentence: how ``impl`` at ``dtype`` compares with ``base_impl`` at ``base_dtype`` in
    time and in error against float64."""
    c = against(df, op, impl, dtype, base_impl, base_dtype, shape_set)
    who, base = f"{label(impl)} at {dtype}", f"{label(base_impl)} at {base_dtype}"
    if c.verdict == "not measured":
        return f"{who} and {base} were not both measured at this shape."
    shape = V.first_shape(df, op, shape_set)
    ea, _ = errors(checks, op, impl, dtype, shape)
    eb, _ = errors(checks, op, base_impl, base_dtype, shape)
    if c.verdict == "tie":
        speed = f"{who} takes about the same kernel time as {base} (within {100 * c.tolerance:.0f}%)"
    else:
        how = (f"is {c.b / c.a:.2f} times as fast as {base}" if c.verdict == "faster" else
               f"takes {c.a / c.b:.2f} times the kernel time of {base}")
        speed = f"{who} {how} ({c.a:,.0f} against {c.b:,.0f} µs of kernel time)"
    if math.isfinite(ea) and math.isfinite(eb):
        rel = "lower than" if ea < eb / 1.5 else "higher than" if ea > eb * 1.5 else "about the same as"
        speed += f", with a relative error against float64 of {ea:.2g}, {rel} the other's {eb:.2g}"
    return speed + "."


def best_per(df: pd.DataFrame, op: str, keys: tuple, tile_of: str = "large", dtype: str = "fp32") -> pd.DataFrame:
    """The tile sweep of ``op`` reduced to the fastest config for each combination of ``keys`` (e.g. the
    layout and the store): one row each, with the config that won and its kernel time, fastest first.
    Empty when the sweep recorded none of ``keys``."""
    t = C.tiles(df, op, tile_of, dtype)
    t = t[t["config"].map(lambda c: all(k in c for k in keys))] if len(t) else t
    if t.empty:
        return pd.DataFrame(columns=list(keys) + ["kernel_us", "config", "shape"])
    for k in keys:
        t[k] = t["config"].map(lambda c, k=k: c[k])
    best = t.loc[t.groupby(list(keys))["kernel_us"].idxmin()]
    return best[list(keys) + ["kernel_us", "config", "shape"]].sort_values("kernel_us").reset_index(drop=True)
