"""The training chapter's tables and sentences: what backward adds to an operation's cost (stated by the
specs, measured in the ``pass`` rows), how near the memory-bound backward kernels come to the copy
bandwidth, and the training step of each block (``mage.train``'s rows).

Every comparison goes through ``mage.views`` (``judge`` / ``compare`` / ``against_fastest``) with the
harness's tie tolerance, so a re-run that flips an order rewrites the sentence. Implementations are named
by their registry roles ('custom', 'baseline', 'library_family'), operations by the specs.
"""
from __future__ import annotations

import math

import pandas as pd

from . import claims as C
from . import views as V
from .errors import MageInputError
from .ops import OPS, peak_tflops

# issue 16's targets: a memory-bound backward kernel at this share of the copy bandwidth at the large
# shapes (and at least as fast as the compiled backward); the custom training step at least as fast as
# the fastest PyTorch variant
COPY_TARGET = 0.85
PASSES = ("forward", "backward", "both")


def role(name: str) -> str:
    """The implementation (or family) claiming ``name``; '' when none does (an optional role)."""
    from . import registry
    try:
        return registry.role(name)
    except MageInputError:
        return ""


def of_pass(df: pd.DataFrame, pass_: str) -> pd.DataFrame:
    """The rows of one pass (rows written before the column existed are forward rows)."""
    if df is None or df.empty:
        return pd.DataFrame(columns=list(df.columns) if df is not None else ["op"])
    if "pass" not in df.columns:
        return df if pass_ == "forward" else df.iloc[:0]
    return df[df["pass"] == pass_]


def operations() -> list[str]:
    return [n for n, s in OPS.items() if s.kind == "operation"]


def blocks() -> list[str]:
    return [n for n, s in OPS.items() if s.kind == "block"]


def has_backward(df: pd.DataFrame) -> bool:
    return not of_pass(df, "backward").empty or not of_pass(df, "both").empty


# ------------------------------------------------------------------------------- cost (the specs)
def cost_table(shape_set: str = "field") -> pd.DataFrame:
    """Per operation at its first listed shape of the set: forward and backward FLOPs and compulsory bytes
    (FP32), as the specs state them, and backward over forward."""
    rows = []
    for op in operations():
        spec = OPS[op]
        shapes = spec.shapes.get(shape_set) or []
        if not shapes:
            continue
        f_flops, f_bytes = spec.cost(shapes[0], "fp32")
        b_flops, b_bytes = spec.grad_cost(shapes[0], "fp32")
        rows.append(dict(op=op, shape=V.shapes_of(op, shape_set)[0], fwd_flops=f_flops, fwd_bytes=f_bytes,
                         bwd_flops=b_flops, bwd_bytes=b_bytes,
                         flops_ratio=b_flops / f_flops if b_flops is not None and f_flops else math.nan,
                         bytes_ratio=b_bytes / f_bytes if b_bytes is not None and f_bytes else math.nan))
    return pd.DataFrame(rows, columns=["op", "shape", "fwd_flops", "fwd_bytes", "bwd_flops", "bwd_bytes",
                                       "flops_ratio", "bytes_ratio"])


def memory_bound(op: str, shape_set: str, ceil: pd.DataFrame, dtype: str = "fp32") -> bool | None:
    """Whether the backward's byte floor exceeds its FLOP floor on this card (None: no ceilings or cost)."""
    spec = OPS[op]
    shapes = spec.shapes.get(shape_set) or []
    copy = V.ceiling(ceil, "copy_gbps")
    rates = {n: V.ceiling(ceil, n) for n in ("fp32_tflops", "tf32_tflops", "bf16_tflops")}
    if not shapes or not math.isfinite(copy):
        return None
    flops, nbytes = spec.grad_cost(shapes[0], dtype)
    try:
        peak = peak_tflops(rates, dtype)
    except KeyError:
        return None
    if flops is None or not math.isfinite(peak):
        return None
    return nbytes / (copy * 1e3) >= flops / (peak * 1e6)


# ------------------------------------------------------------------------------ measured passes
def pass_shape(df: pd.DataFrame, op: str, shape_set: str) -> str:
    """The shape the chapter shows: the first listed one with backward rows, else with forward rows."""
    for p in ("backward", "both", "forward"):
        s = V.first_shape(of_pass(df, p), op, shape_set)
        if s:
            return s
    return ""


def pass_times(df: pd.DataFrame, shape_set: str = "field", dtype: str = "fp32", view: str = "kernel_time"):
    """One row per (operation, implementation, pass) at the chapter's shape: the headline value with its
    round range, for the implementations with a backward of their own measured."""
    out = []
    for op in V.ops_in(df["op"]) if len(df) else []:
        if op not in OPS or OPS[op].kind != "operation":
            continue
        shape = pass_shape(df, op, shape_set)
        trained = set(of_pass(df, "backward")["impl"]) | set(of_pass(df, "both")["impl"])
        for p in PASSES:
            h = V.headline(of_pass(df, p), op=op, view=view, shape_set=shape_set, cache="warm", dtype=dtype,
                           shape=shape)
            h = h[h["impl"].isin(trained)] if trained else h.iloc[:0]
            for _, r in h.iterrows():
                out.append(dict(op=op, impl=r["impl"], shape=shape, pass_=p, value=float(r["value"]),
                                lo=r["lo"], hi=r["hi"], spread=r["spread"], bytes=r["bytes"], flops=r["flops"],
                                run=r["run"]))
    cols = ["op", "impl", "shape", "pass_", "value", "lo", "hi", "spread", "bytes", "flops", "run"]
    return pd.DataFrame(out, columns=cols).rename(columns={"pass_": "pass"})


def ratio_table(t: pd.DataFrame) -> pd.DataFrame:
    """From ``pass_times``: per (operation, implementation) forward, backward and both, and each over forward."""
    if t.empty:
        return pd.DataFrame(columns=["op", "impl", "shape", "forward", "backward", "both", "bwd_over_fwd",
                                     "both_over_fwd"])
    w = t.pivot_table(index=["op", "impl", "shape"], columns="pass", values="value", aggfunc="first")
    w = w.reindex(columns=list(PASSES)).reset_index()
    order = {o: i for i, o in enumerate(OPS)}
    w = w.sort_values("op", key=lambda c: c.map(order), kind="stable").reset_index(drop=True)
    w["bwd_over_fwd"] = w["backward"] / w["forward"]
    w["both_over_fwd"] = w["both"] / w["forward"]
    return w


def copy_shares(df: pd.DataFrame, ceil: pd.DataFrame, shape_set: str = "large", dtype: str = "fp32"):
    """The custom column's backward at each memory-bound operation: its compulsory bytes over its kernel
    time as a share of the copy bandwidth of the run that recorded it, against ``COPY_TARGET``, and its
    kernel time against the compiled column's backward (the 'compiled' role where one claims it, else the
    fastest library column), a tie within the harness's tolerance."""
    custom, lib = role("custom"), role("library_family")
    bwd = of_pass(df, "backward")
    rows = []
    for op in operations():
        if not memory_bound(op, shape_set, ceil, dtype):
            continue
        shape = pass_shape(df, op, shape_set)
        r = V.case(bwd, op, custom, shape_set=shape_set, dtype=dtype, shape=shape) if shape else None
        share = math.nan
        if r is not None and float(r["value"]) > 0 and math.isfinite(float(r["bytes"])):
            share = float(r["bytes"]) / (float(r["value"]) * 1e3) / V.ceiling(ceil, "copy_gbps", r["run"])
        have = set(V.select(bwd, op=op, shape_set=shape_set)["impl"]) if len(bwd) else set()
        rivals = [role("compiled")] if role("compiled") in have else sorted(
            i for i in have if C.family(i) == lib and i != custom)
        c, rival = V.against_fastest(bwd, op, custom, rivals, shape_set=shape_set, dtype=dtype, shape=shape) \
            if rivals and shape else (V.judge(math.nan, math.nan), "")
        rows.append(dict(op=op, shape=shape, share=share, met=bool(share >= COPY_TARGET) if math.isfinite(share) else None,
                         rival=rival, verdict=c.verdict, custom_us=c.a, rival_us=c.b, tolerance=c.tolerance))
    return pd.DataFrame(rows, columns=["op", "shape", "share", "met", "rival", "verdict", "custom_us", "rival_us",
                                       "tolerance"])


def verdict_words(verdict: str, a: float, b: float, tol: float, what: str = "the time") -> str:
    """'1.3x as fast', 'a tie (within 3%)', '1.2x the time' or 'not measured'."""
    if verdict == "tie":
        return f"a tie (within {C.pct(tol)})"
    if verdict == "faster":
        return f"{b / a:.2f}x as fast"
    if verdict == "slower":
        return f"{a / b:.2f}x {what}"
    return "not measured"


# ------------------------------------------------------------------------------------- training
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


def custom_against_fastest(df: pd.DataFrame, block: str, dtype: str, view: str = "train_step"):
    """(comparison, rival, custom column): the fastest custom step (the plain column, or its whole step
    replayed as a CUDA graph where that was measured) against the fastest library column's, by ``view``:
    the step's event span ('train_step', host launch time included) or its kernel time ('kernel_time',
    the GPU's work alone: the stable view on a shared host)."""
    t = train_rows(df)
    shape = train_shape(df, block)
    custom, lib = role("custom"), role("library_family")
    have = set(V.select(t, op=block, dtype=dtype)["impl"]) if len(t) else set()
    rivals = sorted(i for i in have if C.family(i) == lib)
    mine = sorted(i for i in have if C.family(i) == C.family(custom)) or [custom]
    best = (V.judge(math.nan, math.nan), "", custom)
    if not shape or not rivals:
        return best
    for m in mine:
        c, rival = V.against_fastest(t, block, m, rivals, view=view, shape_set="train", dtype=dtype, shape=shape)
        if math.isfinite(c.a) and not (c.a >= best[0].a):  # the first measured, then any faster
            best = (c, rival, m)
    return best


def loop_words(df: pd.DataFrame) -> str:
    """Whether the PyTorch side of the step comparison includes a column whose whole step is one CUDA
    graph, as the graphed custom column's is (the span view credits the graph as much as the kernels)."""
    from . import registry
    t = train_rows(df)
    pairs = sorted({(o, i) for o, i in zip(t["op"], t["impl"])}) if len(t) else []
    graphed = sorted({C.impl_name(i) for o, i in pairs if C.family(i) == role("library_family")
                      and registry.trains_as_one_graph(o, i)})
    head = "the graphed custom column records its optimizer's update inside its graph"
    if graphed:
        return (f"{head}, and so does {C.join(graphed)} among the PyTorch columns, so the step's span "
                "compares kernels and launch paths on equal terms.")
    return (f"{head}, while `torch.compile`'s CUDA graphs hold the forward and backward only and eager "
            "PyTorch holds none; eager PyTorch captured whole the same way has no recorded row here, so where "
            "the custom step wins on its span but not on its kernel time, the win belongs to the graph, not "
            "to the kernels.")


def train_findings(df: pd.DataFrame) -> str:
    """One sentence per precision: in how many blocks the custom step is at least as fast as the fastest
    PyTorch variant (a tie counts), and which are not."""
    parts = []
    for dtype in ("fp32", "bf16"):
        res = {b: custom_against_fastest(df, b, dtype) for b in blocks()}
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


def backward_findings(df: pd.DataFrame, ceil: pd.DataFrame) -> str:
    """The memory-bound backward kernels against the copy target and the compiled backward, in words."""
    s = copy_shares(df, ceil)
    s = s[s["share"].notna() | (s["verdict"] != "not measured")]
    if s.empty:
        return ("No backward kernel of the custom column has been measured at the large shapes on this card, "
                f"so the {COPY_TARGET:.0%} copy-bandwidth target is not yet answered.")
    met = [C.op_name(o) for o, m in zip(s["op"], s["met"]) if m]
    words = C.join(f"{C.op_name(r.op)} {r.share:.0%}" if math.isfinite(r.share) else f"{C.op_name(r.op)} not measured"
                   for r in s.itertuples())
    vs = C.join(f"{C.op_name(r.op)} {verdict_words(r.verdict, r.custom_us, r.rival_us, r.tolerance)}"
                + (f" against {C.impl_name(r.rival)}" if r.rival else "") for r in s.itertuples())
    return (f"At the large shapes the custom memory-bound backward kernels reach {words} of the copy bandwidth "
            f"on their compulsory bytes ({len(met)} of {len(s)} at or above the {COPY_TARGET:.0%} target); "
            f"in kernel time: {vs}.")
