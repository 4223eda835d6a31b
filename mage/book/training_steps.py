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


def step_table(t: pd.DataFrame) -> pd.DataFrame:
    """``train_table`` wide: one row per (block, precision, implementation) with step time and items per
    second, blocks in the specs' order, FP32 first, implementations in column order."""
    from .figure_style import impls_in
    cols = ["block", "dtype", "shape", "impl", "train_step", "throughput"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    w = t.pivot_table(index=["block", "dtype", "shape", "impl"], columns="view", values="value", aggfunc="first")
    w = w.reindex(columns=["train_step", "throughput"]).reset_index()
    order = {b: i for i, b in enumerate(OPS)}
    rank = {i: k for k, i in enumerate(impls_in(w["impl"]))}
    w = w.assign(_b=w["block"].map(order), _d=(w["dtype"] != "fp32").astype(int), _i=w["impl"].map(rank))
    return w.sort_values(["_b", "_d", "_i"])[cols].reset_index(drop=True)


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


def loop_words(df: pd.DataFrame) -> str:
    """Whether each step comparison that has a graphed custom column also has a PyTorch column whose whole
    step is one CUDA graph (the span view credits the graph as much as the kernels), case by case."""
    from mage.ext.training import paths
    t = train_rows(df)
    graphed = {(o, d, C.family(i)) for o, d, i, v in zip(t["op"], t["dtype"], t["impl"], t["value"])
               if paths.trains_as_one_graph(o, i) and math.isfinite(float(v))} if len(t) else set()
    mine = {(o, d) for o, d, f in graphed if f == C.family(role("custom"))}
    if not mine:
        return "no custom training step recorded here replays its whole step as one CUDA graph."
    head = "the graphed custom column records its optimizer's update inside its graph"
    bare = sorted(mine - {(o, d) for o, d, f in graphed if f == role("library_family")})
    if not bare:
        lib = sorted({C.impl_name(i) for o, i in zip(t["op"], t["impl"])
                      if C.family(i) == role("library_family") and paths.trains_as_one_graph(o, i)})
        return (f"{head}, and in every case measured so does {C.join(lib)} among the PyTorch columns, so the "
                "step's span compares kernels and launch paths on equal terms.")
    cases = C.join(f"{C.op_name(o)} ({d})" for o, d in bare)
    return (f"{head}, while `torch.compile`'s CUDA graphs hold the forward and backward only and eager "
            f"PyTorch holds none; in {cases} no PyTorch column captured whole the same way has a recorded row, "
            "so where the custom step wins there on its span but not on its kernel time, the win belongs to "
            "the graph, not to the kernels.")


def train_findings(df: pd.DataFrame) -> str:
    """One sentence per precision: in how many blocks the custom step is at least as fast as the fastest
    PyTorch variant (a tie counts), and which are not."""
    parts = []
    for dtype in ("fp32", "bf16"):
        res = {b: custom_against_fastest(df, b, dtype) for b in blocks(df)}
        res = {b: r for b, r in res.items() if r[0].verdict != "not measured"}
        if not res:
            parts.append(f"In {dtype} no block's training step was measured for both the custom column and "
                         "a PyTorch variant.")
            continue
        ok = [b for b, (c, _, _) in res.items() if c.verdict in ("faster", "tie")]
        behind = [f"{C.op_name(b)} ({verdict_words(c.verdict, c.a, c.b, c.tolerance)} of "
                  f"{C.impl_name(r)})" for b, (c, r, _) in res.items() if c.verdict == "slower"]
        s = (f"In {dtype} the custom training step is at least as fast as the fastest PyTorch variant in "
             f"{len(ok)} of the {len(res)} blocks measured by its event span")
        s += f"; behind in {C.join(behind)}" if behind else ""
        kern = {b: custom_against_fastest(df, b, dtype, "kernel_time")[0] for b in res}
        kern = {b: c for b, c in kern.items() if c.verdict != "not measured"}
        if kern:
            k_ok = [b for b, c in kern.items() if c.verdict in ("faster", "tie")]
            s += (f". In kernel time alone (the stable view; the spans carry the host's launches, which move "
                  f"with a shared host) it is at least as fast in {len(k_ok)} of {len(kern)}")
            s += "; " + C.join(f"{C.op_name(b)} {verdict_words(c.verdict, c.a, c.b, c.tolerance)}"
                               for b, c in kern.items())
        parts.append(s + ".")
    return " ".join(parts)
