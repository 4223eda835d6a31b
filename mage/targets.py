"""The speed targets of the Triton and Rust columns, computed from a data directory.

Every number comes from the recorded rows (kernel time, warm; at the large shapes one input set
already overflows L2, so warm is cold there), and the ceilings of the same run. ``python -m mage
targets data/h200`` prints the table that kernels/NOTES.md quotes.
"""
from __future__ import annotations

import pandas as pd

from .data import load, load_ceilings

FIELD = {"bias_gelu": "R=2048,C=512", "layernorm": "R=1024,C=1024"}
LARGE = {"matmul": "M=4096,K=4096,N=4096", "bias_gelu": "R=16384,C=8192", "layernorm": "R=32768,C=4096",
         "triangle": "N=384,C=128", "neighbor_agg": "n=1048576,F=64,deg=16,dist=uniform"}
NEIGHBOR_FIELD = {"uniform": "n=8192,F=64,deg=16,dist=uniform", "skewed": "n=8192,F=64,deg=16,dist=skewed"}
NEIGHBOR_LARGE_SKEWED = "n=1048576,F=64,deg=16,dist=skewed"


def _value(df, view, op, impl, shape, dtype="fp32"):
    # a shape can sit in two shape sets (4096^3 is a large shape and a sweep size): the target's own set
    shape_set = "large" if shape in LARGE.values() or shape == NEIGHBOR_LARGE_SKEWED else "field"
    rows = df[(df["view"] == view) & (df["op"] == op) & (df["impl"] == impl) & (df["shape"] == shape)
              & (df["shape_set"] == shape_set)
              & (df["dtype"] == dtype) & (df["cache"] == "warm") & (df["stat"] == "mean") & (df["round"] == 0)]
    return float(rows["value"].iloc[0]) if len(rows) else float("nan")


def targets(path) -> pd.DataFrame:
    df = load(path)
    ceil = load_ceilings(path)
    run = df[df["shape_set"] == "large"]["run"].iloc[0]
    c = ceil[ceil["run"] == run].set_index("name")["value"]
    copy, fp32 = c["copy_gbps"], c["fp32_tflops"]
    k = lambda op, impl, shape, dtype="fp32": _value(df, "kernel_time", op, impl, shape, dtype)  # noqa: E731
    span = lambda op, impl, shape: _value(df, "event_span", op, impl, shape)  # noqa: E731
    rows = []

    def add(what, measured, wanted, met, unit=""):
        rows.append(dict(target=what, measured=measured, unit=unit, wanted=wanted, met=bool(met)))

    def share_of_copy(op, impl):
        spec_bytes = df[(df["op"] == op) & (df["shape"] == LARGE[op]) & (df["shape_set"] == "large")]["bytes"].iloc[0]
        return spec_bytes / (k(op, impl, LARGE[op]) * 1e-6) / 1e9 / copy

    def share_of_fp32(op, impl):
        flops = df[(df["op"] == op) & (df["shape"] == LARGE[op]) & (df["shape_set"] == "large")]["flops"].iloc[0]
        return flops / (k(op, impl, LARGE[op]) * 1e-6) / 1e12 / fp32

    mm, tri, na = LARGE["matmul"], LARGE["triangle"], LARGE["neighbor_agg"]
    # Triton (issue 3)
    for op in ("bias_gelu", "layernorm"):
        s = share_of_copy(op, "triton")
        add(f"Triton {op} large: share of copy bandwidth", s, ">= 0.90", s >= 0.90)
    r = k("matmul", "pytorch", mm) / k("matmul", "triton", mm)
    add("Triton matmul 4096^3 FP32: cuBLAS time / Triton time", r, ">= 0.90", r >= 0.90)
    r = k("triangle", "pytorch", tri) / k("triangle", "triton", tri)
    add("Triton triangle N=384: einsum time / Triton time", r, ">= 1.5", r >= 1.5)
    s = share_of_fp32("triangle", "triton")
    add("Triton triangle N=384: share of cuBLAS FP32 rate", s, ">= 0.85", s >= 0.85)
    for dist, shape in (("uniform", na), ("skewed", NEIGHBOR_LARGE_SKEWED)):
        t = k("neighbor_agg", "triton", shape)
        e, cs, tc = (k("neighbor_agg", i, shape) / t for i in ("pytorch", "cusparse", "torch_compile"))
        add(f"Triton neighbor_agg large {dist}: eager / Triton", e, ">= 10", e >= 10)
        add(f"Triton neighbor_agg large {dist}: cuSPARSE / Triton, torch.compile / Triton",
            f"{cs:.2f}, {tc:.2f}", "> 1, > 1", cs > 1 and tc > 1)
    field = dict(FIELD, **{f"neighbor_agg {d}": s for d, s in NEIGHBOR_FIELD.items()})
    for name, shape in field.items():
        op = name.split()[0]
        t = k(op, "triton", shape)
        e, tc = k(op, "pytorch", shape) / t, k(op, "torch_compile", shape) / t
        add(f"Triton {name} field kernel: eager / Triton, torch.compile / Triton", f"{e:.2f}, {tc:.2f}",
            ">= 1, >= 0.91", e >= 1 and tc >= 1 / 1.1)
    # Rust (issue 4)
    r = k("matmul", "pytorch", mm) / k("matmul", "rust", mm)
    add("Rust tiled matmul 4096^3: cuBLAS time / Rust time", r, ">= 0.70", r >= 0.70)
    r = k("matmul", "pytorch", mm) / k("matmul", "rust_scalar", mm)
    add("Rust scalar matmul 4096^3: cuBLAS time / Rust time (first version)", r, "(kept as the first version)", True)
    for op in ("bias_gelu", "layernorm"):
        s = share_of_copy(op, "rust")
        add(f"Rust {op} large: share of copy bandwidth", s, ">= 0.85", s >= 0.85)
    r = k("neighbor_agg", "rust", na) / k("neighbor_agg", "triton", na)
    add("Rust neighbor_agg large uniform: Rust time / Triton time", r, "<= 1.15", r <= 1.15)
    s = share_of_fp32("triangle", "rust")
    add("Rust triangle N=384: share of cuBLAS FP32 rate", s, ">= 0.60", s >= 0.60)
    for name, shape in field.items():
        op = name.split()[0]
        ours, eager = span(op, "rust", shape), span(op, "pytorch", shape)
        add(f"Rust {name} field event span: rust vs eager", f"{ours:.1f} vs {eager:.1f}", "rust below eager",
            ours < eager, "us")
        gaps = [span(op, i, shape) - k(op, i, shape) for i in ("rust", "rust_ptx_py")]
        native = _value(df, "event_span", op, "rust_native", shape) - k(op, "rust", shape)
        add(f"  span minus kernel time: rust / rust_ptx_py / rust_native", f"{gaps[0]:.1f} / {gaps[1]:.1f} / "
            f"{native:.1f}", "(reported)", True, "us")
    return pd.DataFrame(rows)


def markdown(t: pd.DataFrame) -> str:
    lines = ["| target | measured | wanted | met |", "|---|---|---|---|"]
    for r in t.itertuples():
        m = f"{r.measured:.2f}" if isinstance(r.measured, float) else r.measured
        m += f" {r.unit}" if r.unit else ""
        lines.append(f"| {r.target} | {m} | {r.wanted} | {'yes' if r.met else 'no'} |")
    return "\n".join(lines)


def precision(df: pd.DataFrame, shape_set: str = "large", cache: str = "warm") -> pd.DataFrame:
    """The harness's own precision: per (op, impl, dtype, shape), how far the round means of event_span
    lie from their mean (the largest deviation, as a share of the mean), and the same for span minus
    the host's time inside the call, which removes what the host's speed contributes. ``drift``: how
    far the spans moved over the window in time order (range of the thirds' medians over the median)
    where the run flagged it (over 3%); NaN where it did not, or computed none (``rust_native``, whose
    binary reports rounds only, and windows too short to cut in thirds)."""
    d = df[(df["shape_set"] == shape_set) & (df["cache"] == cache) & (df["stat"] == "mean")]
    key = ["op", "impl", "dtype", "shape"]
    span = d[(d["view"] == "event_span") & (d["round"] > 0)].set_index(key + ["round"])["value"]
    host = d[(d["view"] == "host_time") & (d["round"] > 0)].set_index(key + ["round"])["value"]
    overall = d[(d["view"] == "event_span") & (d["round"] == 0)].set_index(key)
    flags = overall["flags"].fillna("").astype(str) if "flags" in overall else pd.Series("", index=overall.index)
    drift = flags.str.extract(r"span_drift:([0-9.]+)%", expand=False).astype(float) / 100
    out = []
    for k, s in span.groupby(level=key):
        dev = float((s - s.mean()).abs().max() / s.mean())
        h = host.reindex(s.index)
        rest = s - h
        out.append(dict(zip(key, k), rounds=len(s), span_dev=dev,
                        host_dev=float((h.max() - h.min()) / s.mean()) if h.notna().all() else float("nan"),
                        rest_dev=float((rest - rest.mean()).abs().max() / rest.mean()) if h.notna().all() else float("nan"),
                        drift=float(drift.get(k, float("nan")))))
    return pd.DataFrame(out, columns=key + ["rounds", "span_dev", "host_dev", "rest_dev", "drift"])


def precision_all(df: pd.DataFrame) -> pd.DataFrame:
    """``precision`` for the field, large and sweep shapes in both cache modes (not the tile sweep, whose
    rows differ by config), with shape set and cache as columns."""
    parts = [precision(df, ss, c).assign(shape_set=ss, cache=c)
             for ss in ("field", "large", "sweep") for c in ("warm", "cold")]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else precision(df).assign(shape_set=[], cache=[])


def precision_summary(df: pd.DataFrame, tol: float = 0.03) -> str:
    a = precision_all(df)
    p = a[(a["shape_set"] == "large") & (a["cache"] == "warm")]
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
