"""Views of the tidy measurement table: select rows by keyword, reduce them to one statistic per case,
and compare two implementations within the harness's precision.

The table ``mage.load`` returns holds several statistics per case (the mean, median, minimum, p90 ... of
every round, and of all rounds together as round 0). Averaging its ``value`` column mixes them, so code
that needs a number goes through here instead:

    select(df, op="layernorm", view="kernel_time", cache="warm")     # rows, by keyword
    headline(df, shape_set="field")                                   # one row per case: value, lo, hi
    value(df, "layernorm", "triton")                                  # one number (NaN when absent)
    compare(df, "layernorm", "triton", "pytorch")                     # faster / slower / tie

A case is one (op, impl, dtype, shape, shape set, cache, view), plus the config for the tile sweep.
Its headline is the mean over all spans (round 0); its whiskers the range of the round means.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from .errors import MageInputError
from .ops import OPS, shape_key

CASE = ["op", "impl", "dtype", "shape", "shape_set", "cache", "pass", "view", "config", "tile_of"]
KEYWORDS = ("op", "impl", "view", "shape_set", "shape", "cache", "dtype", "run", "round", "stat", "config",
            "tile_of", "family", "pass")
# A selection that names no pass sees the forward rows (and the training steps, which have their own
# shape set): a backward row must be asked for, never averaged into a forward case by accident.
DEFAULT_PASSES = ("forward", "step")
HEADLINE = CASE + ["value", "lo", "hi", "rounds", "spread", "run", "kernel_names", "flags", "flops", "bytes",
                   "floor_us", "achieved_gbps", "achieved_tflops", "frac_of_floor"]
# The harness's stated precision: recorded kernel times reproduce within it on the same card, and
# ``mage.book.targets.precision_summary`` checks every row's round means against it. Two numbers closer than
# this (or than their own rows' spread of round means, if larger) are a tie.
PRECISION = 0.03


def select(df: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows matching every keyword: a value, or a list/tuple/set of accepted values; None (or an
    absent keyword) leaves that column free, except ``pass``: where the rows hold several passes it
    defaults to ``DEFAULT_PASSES`` (``select(df, **{"pass": "backward"})`` for the others). Unknown keywords are an error, not an empty
    result."""
    if "pass" not in where and "pass" in df.columns and df["pass"].nunique() > 1:  # one pass: nothing to mix
        where = {**where, "pass": DEFAULT_PASSES}
    mask = pd.Series(True, index=df.index)
    for key, want in where.items():
        if key not in KEYWORDS:
            raise MageInputError("views", key, f"is not a selectable column; use one of {list(KEYWORDS)}")
        if want is None:
            continue
        if key not in df.columns:
            if len(df) == 0:
                continue
            raise MageInputError("views", key, "is not a column of this data")
        col = df[key]
        if isinstance(want, (list, tuple, set, frozenset)):
            mask &= col.isin(list(want))
        else:
            mask &= col == want
    return df[mask.fillna(False).astype(bool)]


def spread(values) -> float:
    """How far round means lie from their mean: the largest deviation, as a share of the mean."""
    s = pd.Series(values, dtype=float).dropna()
    if s.empty or s.mean() == 0:
        return math.nan
    return float((s - s.mean()).abs().max() / s.mean())


def headline(df: pd.DataFrame, **where) -> pd.DataFrame:
    """One row per case among the rows ``where`` selects: ``value`` the mean over all spans (round 0),
    ``lo``/``hi`` the lowest and highest round mean and ``spread`` their deviation (NaN for views
    measured once, such as kernel time and launches), with the case's floor, rates, kernel names and
    flags. Only the 'mean' statistic is used; a case without a round-0 mean is left out."""
    d = select(df, stat="mean", **where)
    key = [c for c in CASE if c in d.columns]
    if d.empty:
        return pd.DataFrame(columns=HEADLINE)
    d = d.copy()
    for c in key:  # missing config / tile_of must still group
        if d[c].dtype != float:
            d[c] = d[c].astype(object).where(d[c].notna(), "")
    if "config" in key and "shape_set" in d.columns:  # the config names a case only in the tile sweep
        d["config"] = d["config"].astype(object).where(d["shape_set"].astype(str) == "tiles", "")
    top = d[d["round"] == 0]
    if "run" in top.columns and top.duplicated(key).any():
        # two runs' numbers for one case (a frame loaded with run="all"): never pick one silently
        dup = top[top.duplicated(key, keep=False)].iloc[0]
        runs = sorted(set(top[(top[key] == dup[key]).all(axis=1)]["run"].astype(str)))
        raise MageInputError("views", "df", f"holds {len(runs)} runs of the case "
                             f"{dup['op']}/{dup['impl']}/{dup.get('shape', '')} ({', '.join(runs)}); "
                             "load one run per case (mage.load's default) or select a run")
    top = top.drop_duplicates(key)
    rounds = d[d["round"] > 0]
    if len(rounds):
        g = rounds.groupby(key, sort=False)["value"]
        stats = pd.DataFrame({"lo": g.min(), "hi": g.max(), "rounds": g.size(), "spread": g.agg(spread)})
        top = top.merge(stats.reset_index(), on=key, how="left")
    for c in HEADLINE:
        if c not in top.columns:
            top[c] = math.nan if c not in ("kernel_names", "flags") else ""
    for c in ("kernel_names", "flags"):
        top[c] = top[c].astype(object).where(top[c].notna(), "").astype(str)
    return top[HEADLINE + [c for c in top.columns if c not in HEADLINE]].reset_index(drop=True)


def shapes_of(op: str, shape_set: str) -> list[str]:
    """The op's listed shapes of a set, as keys ('field' -> ['R=2048,C=512']); [] when unknown."""
    spec = OPS.get(op)
    return [shape_key(s) for s in spec.shapes.get(shape_set, [])] if spec else []


def first_shape(df: pd.DataFrame, op: str, shape_set: str = "field", **where) -> str:
    """The shape a figure or sentence shows for ``op``: the first of the op's listed shapes of the set
    that has rows ('' when none has)."""
    have = set(select(df, op=op, shape_set=shape_set, **where)["shape"])
    for s in shapes_of(op, shape_set):
        if s in have:
            return s
    return sorted(have)[0] if have else ""


def bars(df: pd.DataFrame, shape_set: str = "field", cache: str = "warm", dtype: str = "fp32") -> pd.DataFrame:
    """``headline`` at each op's first listed shape of the set: what a bar chart of the set draws."""
    d = select(df, shape_set=shape_set, cache=cache, dtype=dtype, stat="mean")
    parts = [headline(d, op=op, shape=first_shape(d, op, shape_set)) for op in ops_in(d["op"])]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=HEADLINE)


def ceiling(ceilings: pd.DataFrame, name: str, run=None) -> float:
    """One of the card's ceilings ('copy_gbps', 'empty_span_us'): the reading of ``run`` when it took
    one, else the newest; NaN when none was measured."""
    rows = ceilings[ceilings["name"] == name] if len(ceilings) else ceilings
    own = rows[rows["run"] == run] if run is not None and "run" in rows else rows.iloc[:0]
    rows = own if len(own) else rows
    return float(rows["value"].iloc[-1]) if len(rows) else math.nan


def ops_in(values, kind: str = "operation") -> list[str]:
    """The operations (or, with ``kind='block'``, the model blocks) among ``values`` in the specs'
    order, unknown ones after them, sorted."""
    have = list(dict.fromkeys(values))
    return [o for o in OPS if o in have and OPS[o].kind == kind] + sorted(o for o in have if o not in OPS)


def case(df: pd.DataFrame, op: str, impl: str, view: str = "kernel_time", shape_set: str = "field",
         cache: str = "warm", dtype: str = "fp32", shape: str | None = None) -> pd.Series | None:
    """The headline row of one case (at the op's first listed shape by default), or None."""
    if shape is None:
        shape = first_shape(select(df, dtype=dtype), op, shape_set)
    h = headline(df, op=op, impl=impl, view=view, shape_set=shape_set, cache=cache, dtype=dtype, shape=shape)
    return h.iloc[0] if len(h) else None


def value(df: pd.DataFrame, op: str, impl: str, view: str = "kernel_time", **kw) -> float:
    """One case's headline value (NaN when it was not measured); keywords as for ``case``."""
    r = case(df, op, impl, view, **kw)
    return float(r["value"]) if r is not None else math.nan


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` in one view: 'faster', 'slower', 'tie' or 'not measured', with the tolerance
    used (a share of the larger value)."""

    verdict: str
    a: float
    b: float
    tolerance: float

    def words(self) -> str:
        return {"faster": "faster than", "slower": "slower than", "tie": "about as fast as"}.get(
            self.verdict, "not comparable with (one is not measured)")


def tie_tolerance(*spreads: float) -> float:
    """The harness's precision, widened to the measured spread of round means of the rows compared."""
    return max([PRECISION] + [s for s in spreads if s is not None and math.isfinite(s)])


def judge(a: float, b: float, tolerance: float = PRECISION) -> Comparison:
    """Compare two times already in hand: a tie when they differ by at most ``tolerance`` of the larger."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return Comparison("not measured", a, b, tolerance)
    if abs(a - b) <= tolerance * max(a, b):
        return Comparison("tie", a, b, tolerance)
    return Comparison("faster" if a < b else "slower", a, b, tolerance)


def compare(df: pd.DataFrame, op: str, a: str, b: str, view: str = "kernel_time", **kw) -> Comparison:
    """Implementation ``a`` against ``b`` for ``op`` in ``view`` (keywords as for ``case``), a tie within
    ``tie_tolerance`` of the two cases' spreads."""
    ra, rb = case(df, op, a, view, **kw), case(df, op, b, view, **kw)
    va = float(ra["value"]) if ra is not None else math.nan
    vb = float(rb["value"]) if rb is not None else math.nan
    tol = tie_tolerance(*(float(r["spread"]) for r in (ra, rb) if r is not None))
    return judge(va, vb, tol)


def fastest(df: pd.DataFrame, op: str, view: str = "kernel_time", impls=None, shape_set: str = "field",
            cache: str = "warm", dtype: str = "fp32") -> tuple[str, float]:
    """(implementation, value) with the least headline value for ``op`` at its first listed shape;
    ('', NaN) when nothing was measured."""
    b = bars(select(df, op=op), shape_set=shape_set, cache=cache, dtype=dtype)
    b = select(b, view=view, impl=list(impls) if impls is not None else None).dropna(subset=["value"])
    if b.empty:
        return "", math.nan
    r = b.loc[b["value"].astype(float).idxmin()]
    return str(r["impl"]), float(r["value"])


def against_fastest(df: pd.DataFrame, op: str, impl: str, rivals, view: str = "kernel_time", **kw):
    """(comparison, rival): ``impl`` against the fastest of ``rivals`` measured in ``view`` (keywords as
    for ``case``), a tie within the two cases' tolerance; rival '' when none of them was measured."""
    times = {r: value(df, op, r, view, **kw) for r in rivals}
    times = {r: t for r, t in times.items() if math.isfinite(t)}
    if not times:
        return Comparison("not measured", value(df, op, impl, view, **kw), math.nan, PRECISION), ""
    rival = min(times, key=times.get)
    return compare(df, op, impl, rival, view, **kw), rival
