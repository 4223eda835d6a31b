"""The training chapter's tables and sentences: what backward adds to an operation's cost (stated by the
specs, measured in the ``pass`` rows), how near the memory-bound backward kernels come to the copy
bandwidth, and the training step of each block (``mage.ext.training.train``'s rows).

Every comparison goes through ``mage.views`` (``judge`` / ``compare`` / ``against_fastest``) with the
harness's tie tolerance, so a re-run that flips an order rewrites the sentence. Implementations are named
by their registry roles ('custom', 'baseline', 'library_family'), operations by the specs.
"""
from __future__ import annotations

import math

import pandas as pd

from mage.book import claims as C
from mage import views as V
from mage.ext.training.passes import grad_cost
from mage.ops import OPS, parse_shape, peak_tflops

# the training steps' tables and sentences, and what the two share, in this chapter's one namespace
from .training_steps import (blocks, custom_against_fastest, fastest_custom, role,  # noqa: F401
                             train_rows, train_shape, train_table, verdict_words)

# issue 16's targets: a memory-bound backward kernel at this share of the copy bandwidth at the large
# shapes (and at least as fast as the compiled backward); the custom training step at least as fast as
# the fastest PyTorch variant
COPY_TARGET = 0.85
PASSES = ("forward", "backward", "both")


def of_pass(df: pd.DataFrame, pass_: str) -> pd.DataFrame:
    """The rows of one pass (rows written before the column existed are forward rows)."""
    if df is None or df.empty:
        return pd.DataFrame(columns=list(df.columns) if df is not None else ["op"])
    if "pass" not in df.columns:
        return df if pass_ == "forward" else df.iloc[:0]
    return df[df["pass"] == pass_]


def operations() -> list[str]:
    return [n for n, s in OPS.items() if s.kind == "operation"]


# ------------------------------------------------------------------------------- cost (the specs)
def cost_table(shape_set: str = "field") -> pd.DataFrame:
    """Per operation at its first listed shape of the set: forward and backward FLOPs and compulsory bytes
    (FP32), as the specs and their facets state them, and backward over forward."""
    rows = []
    for op in operations():
        spec = OPS[op]
        shapes = spec.shapes.get(shape_set) or []
        if not shapes:
            continue
        f_flops, f_bytes = spec.cost(shapes[0], "fp32")
        b_flops, b_bytes = grad_cost(spec, shapes[0], "fp32")
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
    flops, nbytes = grad_cost(spec, shapes[0], dtype)
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
        for shape in backward_shapes(bwd, op, shape_set) or [pass_shape(df, op, shape_set)]:
            rows.append(_copy_share(bwd, ceil, op, shape, shape_set, dtype, custom, lib))
    return pd.DataFrame(rows, columns=["op", "shape", "share", "met", "rival", "verdict", "custom_us", "rival_us",
                                       "tolerance"])


def backward_shapes(bwd: pd.DataFrame, op: str, shape_set: str) -> list[str]:
    """Every listed shape of the set with the custom column's backward recorded, in the spec's order
    (both graphs of the neighbour aggregation, say), so no recorded case is left out of the table."""
    have = set(V.select(bwd, op=op, shape_set=shape_set, impl=role("custom"))["shape"]) if len(bwd) else set()
    return [s for s in V.shapes_of(op, shape_set) if s in have]


def _copy_share(bwd, ceil, op, shape, shape_set, dtype, custom, lib) -> dict:
    """One (operation, shape): the backward's share of the copy bandwidth and its verdict against the
    compiled backward."""
    r = V.case(bwd, op, custom, shape_set=shape_set, dtype=dtype, shape=shape) if shape else None
    share = math.nan
    if r is not None and float(r["value"]) > 0 and math.isfinite(float(r["bytes"])):
        share = float(r["bytes"]) / (float(r["value"]) * 1e3) / V.ceiling(ceil, "copy_gbps", r["run"])
    have = set(V.select(bwd, op=op, shape_set=shape_set)["impl"]) if len(bwd) else set()
    rivals = [role("compiled")] if role("compiled") in have else sorted(
        i for i in have if C.family(i) == lib and i != custom)
    c, rival = V.against_fastest(bwd, op, custom, rivals, shape_set=shape_set, dtype=dtype, shape=shape) \
        if rivals and shape else (V.judge(math.nan, math.nan), "")
    return dict(op=op, shape=shape, share=share, met=bool(share >= COPY_TARGET) if math.isfinite(share) else None,
                rival=rival, verdict=c.verdict, custom_us=c.a, rival_us=c.b, tolerance=c.tolerance)


def case_names(s: pd.DataFrame) -> list[str]:
    """Each row's operation name, with what tells its shapes apart where an operation has several
    ('neighbour aggregation (dist=skewed)')."""
    out = []
    for r in s.itertuples():
        mine = [parse_shape(x) for x in s[s["op"] == r.op]["shape"] if x]
        if len(mine) < 2 or not r.shape:
            out.append(C.op_name(r.op))
            continue
        this = parse_shape(r.shape)
        diff = [k for k in this if any(m.get(k) != this[k] for m in mine)]
        out.append(f"{C.op_name(r.op)} ({', '.join(f'{k}={this[k]}' for k in diff)})")
    return out


