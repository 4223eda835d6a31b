"""The book's comparative sentences, each computed from the data by one function with a stated tolerance.

A page never types "X is faster than Y": it glues what a function here returns, so a re-run on another
card (or data where the order flips) rewrites the sentence. Every comparison goes through
``mage.views.judge`` with ``views.tie_tolerance`` (the harness's precision, widened to the measured spread
of the rows compared), so two numbers within it read as a tie. Only like is compared with like: an
implementation without rows of a view of its own (one that borrows another's kernel time) is left out
of that view's comparison. Names of operations and implementations come from the facets and the registry.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from mage import facets
from mage import views as V
from mage.ops import OPS

MICRO = "µs"


# ------------------------------------------------------------------------------------------- names
def op_name(op: str) -> str:
    return (facets.get(op, "label", "") or op) if op in OPS else str(op)


def _impl(name: str):
    from mage import registry
    return next((i for i in registry.impls() if i.name == name), None)


def impl_name(name: str) -> str:
    i = _impl(name)
    return (facets.column_declared(i.name, "label", "") or i.name) if i is not None else str(name)


def family(name: str) -> str:
    i = _impl(name)
    return i.family if i is not None else ""


def us(v: float) -> str:
    """A time as prose: three significant digits and µs; 'not measured' for NaN."""
    return f"{v:.3g} {MICRO}" if v is not None and math.isfinite(v) else "not measured"


def pct(tol: float) -> str:
    return f"{100 * tol:.0f}%"


def join(words) -> str:
    words = list(words)
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


# ----------------------------------------------------------------------------------------- leaders
@dataclass(frozen=True)
class Leaders:
    """Who has the least value of one view for one operation: ``leaders`` are the fastest and every
    implementation tied with it (within ``tolerance``), fastest first; ``values`` every candidate's value."""

    op: str
    view: str
    leaders: tuple = ()
    values: dict = field(default_factory=dict)
    tolerance: float = V.PRECISION

    @property
    def measured(self) -> bool:
        return bool(self.leaders)

    @property
    def tie(self) -> bool:
        return len(self.leaders) > 1

    def short(self) -> str:
        """'Triton, 2.81 µs' or 'torch.compile and Triton tie within 3% (2.87 and 2.87 µs)'."""
        if self.tie:
            return self.words().replace(", tied", " tie")
        return self.words().replace(" (", ", ").rstrip(")") if self.leaders else "not measured"

    def words(self) -> str:
        """'Triton (2.81 µs)' or 'torch.compile and Triton, tied within 3% (2.87 and 2.87 µs)'."""
        if not self.leaders:
            return "not measured"
        names = join(impl_name(i) for i in self.leaders)
        if not self.tie:
            return f"{names} ({us(self.values[self.leaders[0]])})"
        vals = join(f"{self.values[i]:.3g}" for i in self.leaders)
        return f"{names}, tied within {pct(self.tolerance)} ({vals} {MICRO})"


def candidates(df: pd.DataFrame, op: str, view: str, impls=None, dtype: str = "fp32", cache: str = "warm",
               shape_set: str = "field", shape: str | None = None) -> pd.DataFrame:
    """The headline rows of ``view`` for ``op`` (at its first listed shape of the set unless ``shape``):
    only implementations with rows of that view of their own, optionally only ``impls``."""
    d = V.select(df, op=op, dtype=dtype, cache=cache, shape_set=shape_set)
    shape = shape or V.first_shape(d, op, shape_set)
    h = V.headline(d, view=view, shape=shape)
    if impls is not None:
        h = h[h["impl"].isin(list(impls))]
    return h.dropna(subset=["value"]).drop_duplicates("impl")


def leaders(df: pd.DataFrame, op: str, view: str = "kernel_time", impls=None, **where) -> Leaders:
    """The fastest implementation of ``view`` and every one tied with it (``views.judge``, tolerance
    from ``views.tie_tolerance`` of the two rows' spreads)."""
    h = candidates(df, op, view, impls, **where)
    if h.empty:
        return Leaders(op, view)
    h = h.sort_values("value")
    best = h.iloc[0]
    lead, tols = [], [V.PRECISION]
    for _, r in h.iterrows():
        tol = V.tie_tolerance(best["spread"], r["spread"])
        if r["impl"] == best["impl"] or V.judge(float(best["value"]), float(r["value"]), tol).verdict == "tie":
            lead.append(str(r["impl"]))
            tols.append(tol)
    values = {str(r["impl"]): float(r["value"]) for _, r in h.iterrows()}
    return Leaders(op, view, tuple(lead), values, max(tols))


# ------------------------------------------------------------------------------- the claims
def views_disagree(df: pd.DataFrame, op: str, a: str = "kernel_time", b: str = "event_span", **where):
    """(True, False or None, leaders of a, leaders of b) over the implementations measured in BOTH views:
    the views disagree when no implementation leads (or ties for the lead) in both. None: not measured."""
    both = set(candidates(df, op, a, **where)["impl"]) & set(candidates(df, op, b, **where)["impl"])
    la, lb = leaders(df, op, a, impls=both, **where), leaders(df, op, b, impls=both, **where)
    if not (la.measured and lb.measured) or len(both) < 2:
        return None, la, lb
    return not (set(la.leaders) & set(lb.leaders)), la, lb


def launch_path(df: pd.DataFrame, **where) -> str:
    """The same PTX's event span from a process that launches it itself against the span of the
    implementation whose kernels it shares (``Impl.kernels_of``): the launch path, like with like."""
    from mage import registry
    pairs = {(i.name, i.kernels_of) for i in registry.impls() if i.own_spans is not None and i.kernels_of}
    out = []
    for own, of in sorted(pairs):
        ratios, n, shorter = [], 0, 0
        for op in V.ops_in(df["op"]):
            c = V.compare(df, op, own, of, "event_span", **where)
            if c.verdict == "not measured":
                continue
            n += 1
            if c.verdict == "faster":
                shorter += 1
                ratios.append(c.b / c.a)
        if n:
            out.append(f"{impl_name(own)} has a shorter event span than {impl_name(of)}, which launches the same "
                       f"PTX, in {shorter} of {n} operations"
                       + (f", by a factor of {min(ratios):.2g} to {max(ratios):.2g}" if shorter else "")
                       + f" (ties within {pct(V.PRECISION)}).")
    return " ".join(out) or "No implementation took its own spans, so the launch paths cannot be compared."


def checks(c: pd.DataFrame) -> str:
    """What the correctness checks covered, from the checks table: how many, of what, on which input
    distributions, and how many passed (never more than the table holds)."""
    if c is None or c.empty:
        return "This data set records no correctness checks."
    passed = c["passed"].astype(str).str.lower().isin(["true", "1"])
    dists = sorted(c["dist"].dropna().astype(str).unique()) if "dist" in c else []
    combos = c[["op", "impl", "dtype"]].drop_duplicates().shape[0]
    dist = (f"inputs drawn from the {join(dists)} distribution{'s' if len(dists) > 1 else ''}" if dists
            else "inputs of an unrecorded distribution")
    fail = "" if passed.all() else f"; {int((~passed).sum())} failed and were never timed"
    return (f"{int(passed.sum())} of {len(c)} correctness checks passed ({combos} operation, implementation and "
            f"precision combinations at {c['shape'].nunique()} shapes, {dist}{fail}).")


def smallest_sweep(df: pd.DataFrame, ceilings: pd.DataFrame, dtype: str = "fp32") -> str:
    """How near the smallest point of each operation's size sweep comes to an empty kernel."""
    empty = V.ceiling(ceilings, "empty_kernel_us")
    vals = []
    for op in V.ops_in(df["op"]):
        shapes = V.shapes_of(op, "sweep")
        have = set(V.select(df, op=op, shape_set="sweep", dtype=dtype)["shape"])
        first = next((s for s in shapes if s in have), None)
        if first:
            h = V.headline(df, op=op, shape_set="sweep", shape=first, view="kernel_time", dtype=dtype, cache="warm")
            vals += [float(v) for v in h["value"].dropna()]
    if not vals:
        return "No size sweep was measured."
    lo, hi = min(vals), max(vals)
    if not math.isfinite(empty) or empty <= 0:
        return f"At the smallest point of each sweep the kernels take {us(lo)} to {us(hi)}."
    return (f"At the smallest point of each sweep the kernels take {us(lo)} to {us(hi)}, {lo / empty:.2g} to "
            f"{hi / empty:.2g} times an empty kernel's {us(empty)}: near it, not at it.")


def tiles(df: pd.DataFrame, op: str, tile_of: str = "field", dtype: str = "fp32") -> pd.DataFrame:
    """The tile sweep of ``op`` at one precision with each config's kernel time and reuse count (from
    the spec)."""
    h = V.headline(df, op=op, shape_set="tiles", dtype=dtype, view="kernel_time")
    if "tile_of" in h:
        h = h[h["tile_of"].replace("", tile_of) == tile_of]
    reuse = facets.get(op, "reuse", None) if op in OPS else None
    rows = []
    for _, r in h.iterrows():
        if not r["config"]:
            continue
        cfg = json.loads(r["config"])
        ru = reuse(cfg) if reuse else {}
        rows.append(dict(config=cfg, shape=r["shape"], kernel_us=float(r["value"]),
                         fmas_per_load=ru.get("fmas_per_load", math.nan)))
    return pd.DataFrame(rows, columns=["config", "shape", "kernel_us", "fmas_per_load"])


def reuse_against_time(df: pd.DataFrame, op: str, tile_of: str = "field"):
    """(sentence, most-reuse row, fastest row) of the tile sweep: whether the configs with the most
    reuse per load were also the fastest, as a rank among all configs."""
    t = tiles(df, op, tile_of).dropna(subset=["fmas_per_load"])
    if len(t) < 2:
        return "The tile sweep did not record enough configurations to compare.", None, None
    t = t.sort_values("kernel_us").reset_index(drop=True)
    fast = t.iloc[0]
    top = t[t["fmas_per_load"] == t["fmas_per_load"].max()]
    worst_rank = int(top.index.max()) + 1
    most = t.loc[top.index.max()]
    c = V.judge(float(most["kernel_us"]), float(fast["kernel_us"]))
    if c.verdict == "tie":
        s = (f"The configurations with the most reuse ({most['fmas_per_load']:.3g} multiply-adds per load) were "
             f"as fast as the best (within {pct(c.tolerance)}).")
    else:
        where = "the slowest of all" if worst_rank == len(t) else f"number {worst_rank} of {len(t)} by speed"
        s = (f"The configurations with the most reuse ({most['fmas_per_load']:.3g} multiply-adds per load) were not "
             f"the fastest: the slowest of them took {us(most['kernel_us'])}, {where}, against {us(fast['kernel_us'])} "
             f"for the fastest, which reuses {fast['fmas_per_load']:.3g} per load.")
    return s, most, fast
