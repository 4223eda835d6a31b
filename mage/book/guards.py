"""Guards for the book's comparative sentences. A page writes its sentence in its own words and calls one
of these first: each checks that the data still supports that sentence, with the harness's tolerance
(``views.judge``), returns the numbers the sentence glues, and raises ``ClaimFailed`` when it does not.
"""
from __future__ import annotations

import math

import pandas as pd

from . import claims as C
from mage import views as V

RIVALS = ("pytorch", "torch_compile", "torch_compile_graphs")  # the PyTorch columns of a model block


class ClaimFailed(AssertionError):
    """The data no longer supports a sentence the book states; the page must be rewritten."""


def _fail(sentence: str, detail: str):
    raise ClaimFailed(f"the data no longer supports {sentence!r}: {detail}")


def require(holds: bool, sentence: str, detail: str = "the data does not hold it") -> None:
    """A condition a sentence rests on that no other guard states (a block served, a part located)."""
    if not holds:
        _fail(sentence, detail)


def verdict(df: pd.DataFrame, op: str, a: str, b: str, expect: str, view: str = "kernel_time",
            sentence: str = "", **where) -> V.Comparison:
    """``a`` against ``b`` must read ``expect`` ('faster', 'slower' or 'tie'); returns the comparison."""
    c = V.compare(df, op, a, b, view, **where)
    if c.verdict != expect:
        _fail(sentence or f"{a} {expect} {b} ({op}, {view})", f"{c.verdict} ({c.a:.4g} against {c.b:.4g})")
    return c


def leaders(df: pd.DataFrame, op: str, expect, view: str = "kernel_time", sentence: str = "", impls=None,
            **where) -> C.Leaders:
    """The implementations that lead ``op`` (the fastest and every one tied with it) must be exactly
    ``expect``; returns the leaders with every candidate's value."""
    ld = C.leaders(df, op, view, impls=impls, **where)
    if set(ld.leaders) != set(expect):
        _fail(sentence or f"{sorted(expect)} lead {op} ({view})", f"the leaders are {list(ld.leaders)}")
    return ld


def lead_by(df: pd.DataFrame, op: str, impl: str, rivals, view: str = "kernel_time", sentence: str = "",
            **where) -> tuple[float, str]:
    """``impl`` must beat every measured one of ``rivals`` beyond the tolerance; returns (how many times
    the fastest rival's value, that rival)."""
    c, rival = V.against_fastest(df, op, impl, [r for r in rivals if r != impl], view, **where)
    if c.verdict != "faster":
        _fail(sentence or f"{impl} leads {op} ({view})", f"{c.verdict} against {rival or 'nothing measured'}")
    return c.b / c.a, rival


def block_against_fastest(df: pd.DataFrame, block: str, dtype: str, expect: str, impl: str = "triton",
                          sentence: str = "", view: str = "kernel_time") -> tuple[V.Comparison, str]:
    """A custom block against the fastest PyTorch column at the block's first field shape."""
    shape = V.first_shape(df, block, "field")
    c, rival = V.against_fastest(df, block, impl, RIVALS, view, dtype=dtype, shape=shape)
    if c.verdict != expect:
        _fail(sentence or f"{block} at {dtype}: custom {expect} than the fastest PyTorch column",
              f"{c.verdict} ({c.a:.4g} against {c.b:.4g}, {rival or 'no rival'})")
    return c, rival


def speedup_range(df: pd.DataFrame, blocks, dtype: str, sentence: str = "", impl: str = "triton"):
    """Every one of ``blocks`` at ``dtype`` faster than its fastest PyTorch column; returns (least,
    greatest) ratio of the rival's time over the custom one's."""
    ratios = [c.b / c.a for c, _ in (block_against_fastest(df, b, dtype, "faster", impl, sentence) for b in blocks)]
    return min(ratios), max(ratios)


def views_disagree(df: pd.DataFrame, **where) -> list[str]:
    """The operations whose kernel-time and event-span leaders share no implementation (like with like);
    at least one, since a page says that the views can disagree."""
    ops = [op for op in V.ops_in(df["op"]) if C.views_disagree(df, op, **where)[0]]
    if not ops:
        _fail("the views disagree about the winner", "no operation's leaders differ between the views")
    return ops


def at_least(value: float, bound: float, sentence: str) -> float:
    """A measured share or ratio a sentence calls large (``value >= bound``)."""
    if not (math.isfinite(value) and value >= bound):
        _fail(sentence, f"{value:.4g} is below {bound:.4g}")
    return value


def at_most(value: float, bound: float, sentence: str) -> float:
    """A measured share or ratio a sentence calls small (``value <= bound``)."""
    if not (math.isfinite(value) and value <= bound):
        _fail(sentence, f"{value:.4g} is above {bound:.4g}")
    return value


def all_checks_passed(checks: pd.DataFrame, sentence: str = "every implementation passed its check") -> int:
    """Every recorded correctness check passed; returns how many there were."""
    if checks is None or checks.empty:
        _fail(sentence, "no checks are recorded")
    passed = checks["passed"].astype(str).str.lower().isin(["true", "1"])
    if not passed.all():
        _fail(sentence, f"{int((~passed).sum())} checks failed")
    return len(checks)


def times(ratio: float) -> str:
    """A ratio as a reader says it: '2.4' (two significant digits, plain notation)."""
    return f"{ratio:#.2g}" if ratio < 10 else f"{ratio:.0f}"


def judged(a: float, b: float, expect: str, sentence: str, tolerance: float = V.PRECISION) -> V.Comparison:
    """Two values already in hand (a published figure, a derived time) must read ``expect``."""
    c = V.judge(a, b, tolerance)
    if c.verdict != expect:
        _fail(sentence, f"{c.verdict} ({a:.4g} against {b:.4g})")
    return c


def smallest_sweep(df: pd.DataFrame, dtype: str = "fp32") -> tuple[float, float]:
    """(least, greatest) kernel time at the smallest measured point of each operation's size sweep."""
    vals = []
    for op in V.ops_in(df["op"]):
        have = set(V.select(df, op=op, shape_set="sweep", dtype=dtype)["shape"])
        first = next((s for s in V.shapes_of(op, "sweep") if s in have), None)
        if first:
            h = V.headline(df, op=op, shape_set="sweep", shape=first, view="kernel_time", dtype=dtype, cache="warm")
            vals += [float(v) for v in h["value"].dropna()]
    return (min(vals), max(vals)) if vals else (math.nan, math.nan)
