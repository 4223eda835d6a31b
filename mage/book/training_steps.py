"""The training chapter's step tables and sentences (``mage.ext.training.train``'s rows): each block's step time and
items per second per column, the custom step against the fastest PyTorch variant in the step's span and in
kernel time, and whether both sides of that comparison own their whole step as a CUDA graph. Re-exported
by ``mage.book.training``, the chapter's one namespace."""
from __future__ import annotations

import math

import pandas as pd

from mage import views as V
from mage.book import claims as C
from mage.errors import MageInputError
from mage.ops import OPS


def role(name: str) -> str:
    """The implementation (or family) claiming ``name``; '' when none does (an optional role)."""
    from mage import registry
    try:
        return registry.role(name)
    except MageInputError:
        return ""


def blocks(df) -> list[str]:
    """The blocks whose training steps the data holds, in figure order."""
    have = set(df["op"]) if len(df) else set()
    return [n for n, s in OPS.items() if s.kind == "block" and n in have]


def verdict_words(verdict: str, a: float, b: float, tol: float, what: str = "the time") -> str:
    """'1.3x as fast', 'a tie (within 3%)', '1.2x the time' or 'not measured'."""
    if verdict == "tie":
        return f"a tie (within {C.pct(tol)})"
    if verdict == "faster":
        return f"{b / a:.2f}x as fast"
    if verdict == "slower":
        return f"{a / b:.2f}x {what}"
    return "not measured"


def train_rows(df: pd.DataFrame) -> pd.DataFrame:
    return V.select(df, shape_set="train") if len(df) and "shape_set" in df.columns else df.iloc[:0]


def train_shape(df: pd.DataFrame, block: str) -> str:
    """The block's training shape shown: its first field shape with step rows, else any it has."""
    have = set(V.select(train_rows(df), op=block)["shape"])
    for s in V.shapes_of(block, "field") + V.shapes_of(block, "large"):
        if s in have:
            return s
    return sorted(have)[0] if have else ""


def train_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (block, precision, implementation): items per second and step time at the block's shape."""
    t = train_rows(df)
    rows = []
    for block in V.ops_in(t["op"], kind="block") if len(t) else []:
        shape = train_shape(df, block)
        for dtype in ("fp32", "bf16"):
            for view in ("throughput", "train_step"):
                h = V.headline(t, op=block, view=view, dtype=dtype, shape=shape, shape_set="train")
                for _, r in h.iterrows():
                    rows.append(dict(block=block, dtype=dtype, shape=shape, impl=r["impl"], view=view,
                                     value=float(r["value"]), lo=r["lo"], hi=r["hi"]))
    return pd.DataFrame(rows, columns=["block", "dtype", "shape", "impl", "view", "value", "lo", "hi"])


def fastest_custom(df: pd.DataFrame, block: str, dtype: str) -> str:
    """The custom column a block's verdicts use, chosen once for both views: of the plain custom column and
    its whole-step graph, the faster by the step's span (by kernel time where no span was recorded)."""
    t = train_rows(df)
    custom = role("custom")
    have = set(V.select(t, op=block, dtype=dtype)["impl"]) if len(t) else set()
    mine = sorted(i for i in have if C.family(i) == C.family(custom))
    shape = train_shape(df, block)
    for view in ("train_step", "kernel_time"):
        best, name = math.inf, ""
        for m in mine:
            h = V.headline(t, op=block, view=view, dtype=dtype, shape=shape, shape_set="train")
            v = h[h["impl"] == m]["value"] if len(h) else []
            if len(v) and float(v.iloc[0]) < best:
                best, name = float(v.iloc[0]), m
        if name:
            return name
    return custom


def custom_against_fastest(df: pd.DataFrame, block: str, dtype: str, view: str = "train_step"):
    """(comparison, rival, custom column): the custom step (``fastest_custom``) against the fastest library
    column's, by ``view``: the step's event span ('train_step', host launch time included) or its kernel
    time ('kernel_time', the GPU's work alone: the stable view on a shared host)."""
    t = train_rows(df)
    shape = train_shape(df, block)
    lib = role("library_family")
    have = set(V.select(t, op=block, dtype=dtype)["impl"]) if len(t) else set()
    rivals = sorted(i for i in have if C.family(i) == lib)
    mine = fastest_custom(df, block, dtype)
    if not shape or not rivals:
        return V.judge(math.nan, math.nan), "", mine
    c, rival = V.against_fastest(t, block, mine, rivals, view=view, shape_set="train", dtype=dtype, shape=shape)
    return c, rival, mine


