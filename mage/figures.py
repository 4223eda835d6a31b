"""The book's figures: one function per kind, each taking tidy DataFrames (and ceilings) and returning a
plotly Figure, so a page cell is one call and the same figures can be made outside the book.

This is the only module that imports plotly; the measuring code never imports it.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import ops

OP_ORDER = ["matmul", "bias_gelu", "layernorm", "triangle", "neighbor_agg"]
OP_LABEL = {"matmul": "matmul", "bias_gelu": "bias + GELU", "layernorm": "LayerNorm",
            "triangle": "triangle contraction", "neighbor_agg": "neighbour aggregation"}
IMPL_ORDER = ["pytorch", "torch_compile", "cusparse", "triton", "rust", "rust_scalar", "rust_ptx_py", "rust_native"]
IMPL_LABEL = {"pytorch": "PyTorch eager", "torch_compile": "torch.compile", "cusparse": "cuSPARSE (torch.sparse)",
              "triton": "Triton", "rust": "Rust", "rust_scalar": "Rust (scalar)",
              "rust_ptx_py": "Rust PTX from Python", "rust_native": "Rust PTX from a Rust binary"}
# Families share a hue: blues for PyTorch, orange for Triton, reds for Rust.
IMPL_COLOR = {"pytorch": "#1f5fa8", "torch_compile": "#6d9fd8", "cusparse": "#9ec3ea", "triton": "#e08a1e",
              "rust": "#b8322a", "rust_scalar": "#e8867f", "rust_ptx_py": "#7a1f1a", "rust_native": "#d65a31"}
VIEW_LABEL = {"kernel_time": "GPU kernel time", "event_span": "event span", "launches": "launches per call",
              "graph_span": "CUDA-graph replay span"}
VIEW_UNIT = {"kernel_time": "us", "event_span": "us", "launches": "launches", "graph_span": "us"}
PUBLISHED_LABEL = "RTX 4090 (published)"
OP_SHORT = {"matmul": "matmul", "bias_gelu": "bias+GELU", "layernorm": "LayerNorm", "triangle": "triangle",
            "neighbor_agg": "neighbours"}


def use_notebook_renderer() -> None:
    """Pages show figures with plotly's "notebook" renderer (plotly.js inline: works offline), minus the
    MathJax it always fetches from a CDN (the book serves its own, and no figure here uses LaTeX)."""
    import re
    import plotly.io as pio
    from plotly.io._base_renderers import NotebookRenderer

    class OfflineNotebook(NotebookRenderer):
        def to_mimebundle(self, fig_dict):
            bundle = super().to_mimebundle(fig_dict)
            bundle["text/html"] = re.sub(r'<script src="https?://[^"]*mathjax[^"]*"></script>', "",
                                         bundle["text/html"])
            return bundle

    pio.renderers["notebook"] = OfflineNotebook()
    pio.renderers.default = "notebook"


# ------------------------------------------------------------------------------------------- selection
def _ordered(values, order):
    values = list(dict.fromkeys(values))
    return [v for v in order if v in values] + sorted(v for v in values if v not in order)


def field_shape(df: pd.DataFrame, op: str, shape_set: str = "field") -> str:
    """The shape a figure shows for ``op``: the first of the op's listed shapes that has rows."""
    have = set(df.loc[(df["op"] == op) & (df["shape_set"] == shape_set), "shape"])
    for s in ops.OPS[op].shapes.get(shape_set, []):
        if ops.shape_key(s) in have:
            return ops.shape_key(s)
    return sorted(have)[0] if have else ""


def bars(df: pd.DataFrame, shape_set="field", cache="warm", dtype="fp32") -> pd.DataFrame:
    """One row per (op, impl, view): the bar (mean over all rounds), the whiskers (range of round means),
    the shape and the kernel names, at the first listed shape of each op."""
    d = df[(df["shape_set"] == shape_set) & (df["cache"] == cache) & (df["dtype"] == dtype) & (df["stat"] == "mean")]
    out = []
    for op in _ordered(d["op"], OP_ORDER):
        shape = field_shape(d, op, shape_set)
        s = d[(d["op"] == op) & (d["shape"] == shape)]
        for (impl, view), g in s.groupby(["impl", "view"]):
            top = g[g["round"] == 0]
            if top.empty:
                continue
            rounds = g.loc[g["round"] > 0, "value"]
            names = top["kernel_names"].iloc[0] if "kernel_names" in top else ""
            out.append(dict(op=op, impl=impl, view=view, shape=shape, value=float(top["value"].iloc[0]),
                            lo=float(rounds.min()) if len(rounds) else math.nan,
                            hi=float(rounds.max()) if len(rounds) else math.nan,
                            kernel_names=names if isinstance(names, str) else "",
                            flags=top["flags"].iloc[0] if "flags" in top and isinstance(top["flags"].iloc[0], str) else ""))
    return pd.DataFrame(out, columns=["op", "impl", "view", "shape", "value", "lo", "hi", "kernel_names", "flags"])


def _names(s: str, n=3) -> str:
    parts = [p for p in str(s).split("|") if p]
    if not parts:
        return "(none recorded)"
    short = [p if len(p) <= 60 else p[:57] + "..." for p in parts[:n]]
    return "<br>".join(short) + (f"<br>... and {len(parts) - n} more" if len(parts) > n else "")


def _fmt(v: float, unit: str) -> str:
    if unit == "launches":
        return f"{v:.3g}"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _bar_trace(b: pd.DataFrame, view: str, impls: list, showlegend=False, name=None, color=None):
    b = b.set_index("impl").reindex(impls).dropna(subset=["value"])
    unit = VIEW_UNIT[view]
    err = None
    if b["lo"].notna().any():
        err = dict(type="data", symmetric=False, array=(b["hi"] - b["value"]).clip(lower=0).fillna(0).tolist(),
                   arrayminus=(b["value"] - b["lo"]).clip(lower=0).fillna(0).tolist(), thickness=1.2, width=4,
                   color="#333")
    custom = np.stack([b["shape"].astype(str), [_names(n) for n in b["kernel_names"]],
                       [IMPL_LABEL.get(i, i) for i in b.index]], axis=-1) if len(b) else None
    return go.Bar(
        x=list(b.index), y=b["value"].tolist(), error_y=err, name=name or VIEW_LABEL[view],
        marker_color=color or [IMPL_COLOR.get(i, "#888") for i in b.index], showlegend=showlegend,
        text=[_fmt(v, unit) for v in b["value"]], textposition="outside", cliponaxis=False,
        customdata=custom,
        hovertemplate=f"<b>%{{customdata[2]}}</b><br>{VIEW_LABEL[view]}: %{{y:.3g}} {unit}"
                      "<br>shape %{customdata[0]}<br>kernels:<br>%{customdata[1]}<extra></extra>")


def caption(shape_set: str, cache: str, machine: str, shapes: dict | None = None, extra: str = "") -> str:
    shape_txt = ("; shapes " + ", ".join(f"{OP_LABEL[o]} {s}" for o, s in shapes.items())) if shapes else ""
    return f"{machine}, {shape_set} shapes, {cache} cache{shape_txt}.{(' ' + extra) if extra else ''}"


def _caption(fig, text):
    fig.layout.meta = {"caption": text}
    return fig


# ------------------------------------------------------------------------------------------------ main
def main(df: pd.DataFrame, machine: str, cache="warm", views=("kernel_time", "event_span", "launches", "graph_span")):
    """One row per operation, each on its own y scale; bars per implementation; whiskers for the range of
    the three round means (event spans); buttons switch the view."""
    b = bars(df, cache=cache)
    op_list = _ordered(b["op"], OP_ORDER)
    views = [v for v in views if v in set(b["view"])]
    fig = make_subplots(rows=len(op_list), cols=1, vertical_spacing=0.06,
                        subplot_titles=[f"{OP_LABEL[o]} ({field_shape(df, o)})" for o in op_list])
    impls_of = {op: _ordered(b.loc[b["op"] == op, "impl"], IMPL_ORDER) for op in op_list}
    owner = []
    for v in views:
        for r, op in enumerate(op_list, start=1):
            t = _bar_trace(b[(b["op"] == op) & (b["view"] == v)], v, impls_of[op])
            t.visible = v == views[0]
            fig.add_trace(t, row=r, col=1)
            owner.append(v)
    buttons = []
    for v in views:
        layout = {f"yaxis{'' if r == 1 else r}.title.text": VIEW_UNIT[v] for r in range(1, len(op_list) + 1)}
        layout["title.text"] = f"Five operations, {VIEW_LABEL[v]}"
        buttons.append(dict(label=VIEW_LABEL[v], method="update",
                            args=[{"visible": [o == v for o in owner]}, layout]))
    fig.update_layout(
        height=260 * len(op_list) + 150, bargap=0.25, margin=dict(t=150, l=70, r=20, b=40),
        title=dict(text=f"Five operations, {VIEW_LABEL[views[0]]}", x=0, y=0.995, yanchor="top"),
        updatemenus=[dict(type="buttons", direction="right", buttons=buttons, active=0, x=0, y=1.0,
                          xanchor="left", yanchor="bottom", pad=dict(b=40), showactive=True)],
        template="plotly_white")
    for r, op in enumerate(op_list, start=1):
        fig.update_xaxes(categoryorder="array", categoryarray=impls_of[op], row=r, col=1,
                         tickvals=impls_of[op], ticktext=[IMPL_LABEL.get(i, i) for i in impls_of[op]])
        fig.update_yaxes(title_text=VIEW_UNIT[views[0]], rangemode="tozero", row=r, col=1)
    shapes = {o: field_shape(df, o) for o in op_list}
    return _caption(fig, caption("field", cache, machine, shapes,
                                 "FP32, forward only. Bars: mean; whiskers: range of the three round means "
                                 "(event spans only, not a confidence interval). Each row has its own scale."))


def combined(df: pd.DataFrame, machine: str, cache="warm"):
    """Top row time inside the kernels, bottom row time around the call; one column per operation, each
    column on its own scale (shared by its two rows, so the gap between views reads directly)."""
    b = bars(df, cache=cache)
    op_list = _ordered(b["op"], OP_ORDER)
    fig = make_subplots(rows=2, cols=len(op_list), shared_yaxes="columns", vertical_spacing=0.08,
                        horizontal_spacing=0.04, subplot_titles=[OP_SHORT[o] for o in op_list] + [""] * len(op_list),
                        row_titles=["kernel time (us)", "event span (us)"])
    for c, op in enumerate(op_list, start=1):
        impls = _ordered(b.loc[b["op"] == op, "impl"], IMPL_ORDER)
        impls = [i for i in impls if i != "rust_native"] + (["rust_native"] if "rust_native" in impls else [])
        for r, v in enumerate(("kernel_time", "event_span"), start=1):
            fig.add_trace(_bar_trace(b[(b["op"] == op) & (b["view"] == v)], v, impls), row=r, col=c)
            fig.update_xaxes(categoryorder="array", categoryarray=impls, tickangle=-60, row=r, col=c,
                             tickvals=impls, ticktext=[IMPL_LABEL.get(i, i) for i in impls],
                             showticklabels=r == 2)  # the top row has the same bars, in the same colours
        fig.update_yaxes(rangemode="tozero", col=c)
    fig.update_traces(textposition="none")
    fig.update_layout(height=700, template="plotly_white", margin=dict(t=60, l=50, r=40, b=40),
                      title=dict(text="Inside the kernels (top) and around the call (bottom)", x=0))
    return _caption(fig, caption("field", cache, machine, {o: field_shape(df, o) for o in op_list},
                                 "FP32. Each column has its own scale, shared by its two rows."))


# -------------------------------------------------------------------------------------------- roofline
def roofline(df: pd.DataFrame, ceilings: pd.DataFrame, machine: str, shape_sets=("field", "large"), cache="warm"):
    """Achieved GFLOP/s against arithmetic intensity (FLOPs per compulsory byte), under the roofs of the
    card's measured copy bandwidth and FP32 rate."""
    from .data import ceiling
    bw, peak = ceiling(ceilings, "copy_gbps"), ceiling(ceilings, "fp32_tflops") * 1e3  # GB/s, GFLOP/s
    d = df[(df["view"] == "kernel_time") & (df["stat"] == "mean") & (df["round"] == 0) & (df["dtype"] == "fp32")
           & (df["cache"] == cache) & df["shape_set"].isin(shape_sets)].copy()
    d = d[(d["flops"] > 0) & (d["bytes"] > 0) & (d["value"] > 0)]
    d["ai"] = d["flops"] / d["bytes"]
    d["gflops"] = d["flops"] / (d["value"] * 1e3)
    fig = go.Figure()
    lo = max(min(d["ai"].min() if len(d) else 0.1, peak / bw) / 4, 1e-3)
    hi = max(d["ai"].max() if len(d) else 100, peak / bw) * 4
    x = np.logspace(math.log10(lo), math.log10(hi), 200)
    fig.add_trace(go.Scatter(x=x, y=np.minimum(bw * x, peak), mode="lines", line=dict(color="#444", width=2),
                             name=f"roof: {bw:.0f} GB/s copy, {peak / 1e3:.1f} TFLOP/s FP32",
                             hovertemplate="AI %{x:.3g} FLOP/B<br>roof %{y:.4g} GFLOP/s<extra></extra>"))
    symbols = {"matmul": "circle", "bias_gelu": "square", "layernorm": "diamond", "triangle": "triangle-up",
               "neighbor_agg": "x"}
    for impl in _ordered(d["impl"], IMPL_ORDER):
        g = d[d["impl"] == impl]
        fig.add_trace(go.Scatter(
            x=g["ai"], y=g["gflops"], mode="markers", name=IMPL_LABEL.get(impl, impl),
            marker=dict(color=IMPL_COLOR.get(impl, "#888"), size=[9 if s == "field" else 13 for s in g["shape_set"]],
                        symbol=[symbols.get(o, "circle") for o in g["op"]], line=dict(width=1, color="white")),
            customdata=np.stack([g["op"].map(OP_LABEL).fillna(g["op"]), g["shape"], g["value"],
                                 100 * g["gflops"] / np.minimum(bw * g["ai"], peak)], axis=-1),
            hovertemplate="<b>%{customdata[0]}</b> " + IMPL_LABEL.get(impl, impl) +
                          "<br>shape %{customdata[1]}<br>%{customdata[2]:.3g} us, %{y:.4g} GFLOP/s"
                          "<br>%{customdata[3]:.0f}% of the roof<extra></extra>"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOPs per compulsory byte)")
    fig.update_yaxes(type="log", title="achieved GFLOP/s (kernel time)")
    fig.update_layout(height=560, template="plotly_white", title=dict(text="Roofline", x=0),
                      legend=dict(font=dict(size=11)))
    return _caption(fig, caption(" and ".join(shape_sets), cache, machine,
                                 extra="Marker shape: operation (circle matmul, square bias + GELU, diamond LayerNorm, "
                                       "triangle triangle contraction, x neighbour aggregation); small markers "
                                       "field shapes, large markers large shapes. Roofs are this card's measured "
                                       "copy bandwidth and FP32 matmul rate, not datasheet peaks, measured once per "
                                       "run: a point a few percent above its roof means that reading came out low."))


# ---------------------------------------------------------------------------------------- cost vs size
def cost_vs_size(df: pd.DataFrame, ceilings: pd.DataFrame, machine: str, cache="warm", op_list=None):
    """The sweeps: time against compulsory bytes (FLOPs for matmul and the triangle), one panel per
    operation, with the floor (bytes over bandwidth or FLOPs over rate) and an empty kernel's cost drawn.
    Buttons switch between kernel time and event span."""
    d = df[(df["shape_set"] == "sweep") & (df["stat"] == "mean") & (df["round"] == 0) & (df["dtype"] == "fp32")
           & (df["cache"] == cache)]
    op_list = op_list or _ordered(d["op"], OP_ORDER)
    ncols = min(3, len(op_list))
    nrows = math.ceil(len(op_list) / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[OP_LABEL[o] for o in op_list],
                        horizontal_spacing=0.08, vertical_spacing=0.2)
    owner = []
    views = [v for v in ("kernel_time", "event_span") if v in set(d["view"])]
    empty = {"kernel_time": _maybe(ceilings, "empty_kernel_us"), "event_span": _maybe(ceilings, "empty_span_us")}
    seen = set()
    for n, op in enumerate(op_list):
        rc = dict(row=n // ncols + 1, col=n % ncols + 1)
        g = d[d["op"] == op]
        xcol = "flops" if op in ("matmul", "triangle") else "bytes"
        for v in views:
            for impl in _ordered(g["impl"], IMPL_ORDER):
                s = g[(g["impl"] == impl) & (g["view"] == v)].sort_values(xcol)
                if s.empty:
                    continue
                fig.add_trace(go.Scatter(
                    x=s[xcol], y=s["value"], mode="lines+markers", name=IMPL_LABEL.get(impl, impl),
                    legendgroup=impl, showlegend=impl not in seen, visible=v == views[0],
                    line=dict(color=IMPL_COLOR.get(impl, "#888")), marker=dict(size=6),
                    customdata=np.stack([s["shape"], s["floor_us"]], axis=-1),
                    hovertemplate=f"<b>{IMPL_LABEL.get(impl, impl)}</b><br>shape %{{customdata[0]}}"
                                  f"<br>{VIEW_LABEL[v]} %{{y:.3g}} us<br>floor %{{customdata[1]:.3g}} us<extra></extra>"),
                    **rc)
                seen.add(impl)
                owner.append(v)
            floor = g[g["view"] == v].drop_duplicates("shape").sort_values(xcol)
            fig.add_trace(go.Scatter(x=floor[xcol], y=floor["floor_us"], mode="lines", name="floor",
                                     legendgroup="floor", showlegend="floor" not in seen, visible=v == views[0],
                                     line=dict(color="black", dash="dash", width=1.5),
                                     hovertemplate="floor %{y:.3g} us<extra></extra>"), **rc)
            seen.add("floor")
            owner.append(v)
            if empty.get(v) and len(floor):
                fig.add_trace(go.Scatter(x=[floor[xcol].min(), floor[xcol].max()], y=[empty[v]] * 2, mode="lines",
                                         name="empty kernel", legendgroup="empty", showlegend="empty" not in seen,
                                         visible=v == views[0], line=dict(color="#999", dash="dot", width=1.5),
                                         hovertemplate=f"empty kernel, {VIEW_LABEL[v]}: %{{y:.3g}} us<extra></extra>"),
                              **rc)
                seen.add("empty")
                owner.append(v)
        fig.update_xaxes(type="log", title_text="FLOPs" if xcol == "flops" else "bytes", **rc)
        fig.update_yaxes(type="log", title_text="us" if rc["col"] == 1 else None, **rc)
    fig.update_layout(
        height=330 * nrows + 220, template="plotly_white", margin=dict(t=130),
        title=dict(text=f"Cost against size, {VIEW_LABEL[views[0]]}", x=0, y=0.99, yanchor="top"),
        legend=dict(orientation="h", y=-0.1, yanchor="top"),
        updatemenus=[dict(type="buttons", direction="right", active=0, x=0, y=1.07, xanchor="left", yanchor="bottom",
                          buttons=[dict(label=VIEW_LABEL[v], method="update",
                                        args=[{"visible": [o == v for o in owner]},
                                              {"title.text": f"Cost against size, {VIEW_LABEL[v]}"}])
                                   for v in views])])
    return _caption(fig, caption("sweep", cache, machine, extra="FP32. Dashed: the floor, the larger of compulsory "
                                 "bytes over measured copy bandwidth and FLOPs over measured FP32 rate; dotted: "
                                 "an empty kernel measured the same way."))


def _maybe(ceilings, name):
    rows = ceilings[ceilings["name"] == name] if len(ceilings) else ceilings
    return float(rows["value"].iloc[-1]) if len(rows) else None


# ------------------------------------------------------------------------------------------------ cards
def cards(df: pd.DataFrame, published: pd.DataFrame, machine: str, cache="warm"):
    """The original note's published RTX 4090 figures beside this card's, per operation and view, for the
    implementations both have (PyTorch, Triton, Rust)."""
    ours = bars(df, cache=cache)
    pub = published[(published["stat"] == "mean") & (published["round"] == 0)]
    views = ["kernel_time", "event_span", "launches"]
    op_list = [o for o in OP_ORDER if o in set(pub["op"]) or o in set(ours["op"])]
    impls = ["pytorch", "triton", "rust"]
    fig = make_subplots(rows=len(views), cols=len(op_list), vertical_spacing=0.09, horizontal_spacing=0.05,
                        subplot_titles=[OP_SHORT[o] for o in op_list] + [""] * (len(views) - 1) * len(op_list),
                        row_titles=[f"{VIEW_LABEL[v]} ({VIEW_UNIT[v]})" for v in views])
    for r, v in enumerate(views, start=1):
        for c, op in enumerate(op_list, start=1):
            for label, src, color in ((PUBLISHED_LABEL, pub, "#9a9a9a"), (machine, ours, "#2a7f62")):
                s = src[(src["op"] == op) & (src["view"] == v) & src["impl"].isin(impls)].set_index("impl")
                s = s.reindex([i for i in impls if i in s.index])
                shape = s["shape"].astype(str).tolist() if "shape" in s else [""] * len(s)
                fig.add_trace(go.Bar(
                    x=[IMPL_LABEL[i] for i in s.index], y=s["value"].tolist(), name=label, legendgroup=label,
                    showlegend=r == 1 and c == 1, marker_color=color,
                    marker_pattern_shape="/" if label == PUBLISHED_LABEL else "",
                    customdata=np.stack([shape], axis=-1) if len(s) else None,
                    hovertemplate=f"<b>{label}</b> %{{x}}<br>%{{y:.3g}} {VIEW_UNIT[v]}<br>shape %{{customdata[0]}}"
                                  "<extra></extra>"), row=r, col=c)
            fig.update_yaxes(rangemode="tozero", row=r, col=c)
    fig.update_layout(barmode="group", height=800, template="plotly_white", margin=dict(t=120),
                      title=dict(text=f"{PUBLISHED_LABEL} against {machine}", x=0, y=0.99, yanchor="top"),
                      legend=dict(orientation="h", y=1.07, x=0, xanchor="left", yanchor="bottom"))
    return _caption(fig, f"Hatched grey: the original note's published RTX 4090 figures (WSL, FP32; shapes not "
                         f"published; not measured by this project). Green: {machine}, field shapes, {cache} cache. "
                         "The shapes differ, so compare the pattern across implementations, not the heights.")


# ----------------------------------------------------------------------------------------- launch paths
PATHS = [("pytorch", "event_span", "PyTorch eager"), ("torch_compile", "event_span", "torch.compile"),
         ("triton", "event_span", "Triton from Python"), ("rust", "event_span", "Rust"),
         ("rust_ptx_py", "event_span", "Rust PTX from Python"), ("rust_native", "event_span", "Rust PTX from Rust"),
         ("pytorch", "graph_span", "graph replay: PyTorch"), ("triton", "graph_span", "graph replay: Triton"),
         ("rust", "graph_span", "graph replay: Rust"), ("rust_ptx_py", "graph_span", "graph replay: Rust PTX"),
         ("rust_native", "graph_span", "graph replay: Rust binary")]
PATH_COLOR = {"event_span": None, "graph_span": "#5b8c5a"}


def launch_overhead(df: pd.DataFrame, cache="warm") -> pd.DataFrame:
    """Span minus kernel time per (op, launch path). The Rust binary records spans only; its kernel time
    is that of the same PTX launched from Python."""
    b = bars(df, cache=cache)
    rows = []
    for op in _ordered(b["op"], OP_ORDER):
        s = b[b["op"] == op].set_index(["impl", "view"])["value"]
        for impl, view, label in PATHS:
            if (impl, view) not in s.index:
                continue
            kimpl = {"rust_native": "rust_ptx_py"}.get(impl, impl)
            if (kimpl, "kernel_time") not in s.index and impl == "rust_native":
                kimpl = "rust"
            if (kimpl, "kernel_time") not in s.index:
                continue
            span, kern = s[(impl, view)], s[(kimpl, "kernel_time")]
            launches = s.get((kimpl, "launches"), math.nan)
            rows.append(dict(op=op, impl=impl, view=view, path=label, span_us=span, kernel_us=kern,
                             overhead_us=span - kern, launches=launches))
    return pd.DataFrame(rows, columns=["op", "impl", "view", "path", "span_us", "kernel_us", "overhead_us", "launches"])


def launch_paths(df: pd.DataFrame, ceilings: pd.DataFrame, machine: str, cache="warm"):
    """Span minus kernel time for each launch path, one panel per operation; the dotted line is an empty
    kernel's span minus its kernel time."""
    lo = launch_overhead(df, cache=cache)
    op_list = _ordered(lo["op"], OP_ORDER)
    fig = make_subplots(rows=len(op_list), cols=1, vertical_spacing=0.05,
                        subplot_titles=[OP_LABEL[o] for o in op_list])
    empty = None
    es, ek = _maybe(ceilings, "empty_span_us"), _maybe(ceilings, "empty_kernel_us")
    if es is not None and ek is not None:
        empty = es - ek
    for r, op in enumerate(op_list, start=1):
        g = lo[lo["op"] == op]
        colors = [PATH_COLOR[v] or IMPL_COLOR.get(i, "#888") for i, v in zip(g["impl"], g["view"])]
        fig.add_trace(go.Bar(
            y=g["path"], x=g["overhead_us"], orientation="h", marker_color=colors, showlegend=False,
            text=[f"{v:.3g}" for v in g["overhead_us"]], textposition="outside", cliponaxis=False,
            customdata=np.stack([g["span_us"], g["kernel_us"], g["launches"]], axis=-1),
            hovertemplate="<b>%{y}</b><br>span - kernel: %{x:.3g} us<br>span %{customdata[0]:.3g} us, kernel "
                          "%{customdata[1]:.3g} us<br>launches per call %{customdata[2]:.3g}<extra></extra>"),
            row=r, col=1)
        if empty is not None:
            fig.add_vline(x=empty, line=dict(color="#999", dash="dot"), row=r, col=1)
        fig.update_yaxes(autorange="reversed", row=r, col=1)
        fig.update_xaxes(title_text="us" if r == len(op_list) else None, row=r, col=1)
    fig.update_layout(height=300 * len(op_list), template="plotly_white", margin=dict(t=60, l=170),
                      title=dict(text="What the launch path costs: span minus kernel time", x=0))
    extra = "Green: CUDA-graph replay (the same kernels, launched as one graph)."
    if empty is not None:
        extra += f" Dotted: an empty kernel's span minus its kernel time ({empty:.3g} us)."
    return _caption(fig, caption("field", cache, machine, {o: field_shape(df, o) for o in op_list}, extra))


# ---------------------------------------------------------------------------------------- tile explorer
def reuse(op: str, config: dict) -> dict:
    """Distinct inputs loaded and multiply-adds per K step of one program (structure, not traffic)."""
    c = config
    if op == "matmul":
        loads, fmas = c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"], c["BLOCK_M"] * c["BLOCK_N"] * c["BLOCK_K"]
    elif op == "triangle":
        loads = c["BLOCK_C"] * (c["BLOCK_I"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_J"])
        fmas = c["BLOCK_C"] * c["BLOCK_I"] * c["BLOCK_J"] * c["BLOCK_K"]
    else:
        return {}
    return dict(loads=loads, fmas=fmas, fmas_per_load=fmas / loads)


BLOCK_ORDER = ["BLOCK_M", "BLOCK_N", "BLOCK_I", "BLOCK_J", "BLOCK_K", "BLOCK_R", "BLOCK_C", "MAX_BLOCK_C"]


def config_label(config: dict) -> str:
    """'128x64x16 w4 s3 g8': the block sizes in BLOCK_ORDER, then warps, stages, group."""
    c = dict(config)
    blocks = [k for k in BLOCK_ORDER if k in c] + sorted(k for k in c if "BLOCK" in k and k not in BLOCK_ORDER)
    s = "x".join(str(c[k]) for k in blocks)
    extra = [f"{k.replace('num_', '')[0]}{c[k]}" for k in ("num_warps", "num_stages") if k in c]
    extra += [f"g{c['GROUP_M']}"] if "GROUP_M" in c else []
    known = set(blocks) | {"num_warps", "num_stages", "GROUP_M"}
    extra += [f"{k}={c[k]}" for k in sorted(c) if k not in known]  # anything else a sweep varies
    return " ".join([s] + extra)


def tile_table(tiles: pd.DataFrame, op: str, tile_of: str = "field") -> pd.DataFrame:
    """One row per recorded config: kernel time, event span, achieved rates and the reuse count."""
    d = tiles[(tiles["op"] == op) & (tiles["stat"] == "mean") & (tiles["round"] == 0)]
    if "tile_of" in d:
        d = d[d["tile_of"].fillna(tile_of) == tile_of]
    rows = []
    for cfg, g in d.groupby("config", sort=False):
        k = g[g["view"] == "kernel_time"]
        s = g[g["view"] == "event_span"]
        if k.empty:
            continue
        c = json.loads(cfg)
        r = dict(config=cfg, label=config_label(c), shape=k["shape"].iloc[0], kernel_us=float(k["value"].iloc[0]),
                 span_us=float(s["value"].iloc[0]) if len(s) else math.nan,
                 gbps=float(k["achieved_gbps"].iloc[0]) if "achieved_gbps" in k else math.nan,
                 tflops=float(k["achieved_tflops"].iloc[0]) if "achieved_tflops" in k else math.nan, **c)
        r.update(reuse(op, c))
        rows.append(r)
    return pd.DataFrame(rows)


def tile_explorer(tiles: pd.DataFrame, df: pd.DataFrame, op: str, machine: str, tile_of: str = "field"):
    """A slider over the recorded tile sweep of one Triton kernel: the chosen config is highlighted among
    all configs, with its reuse count and times; PyTorch's kernel time at the same shape is drawn for
    scale. Works in static HTML (no kernel runs)."""
    t = tile_table(tiles, op, tile_of)
    if t.empty:
        raise ValueError(f"no recorded tile sweep for {op} ({tile_of} shapes) in the data")
    has_reuse = "fmas_per_load" in t
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=["kernel time per config (us)",
                                        "kernel time against reuse" if has_reuse else "kernel time against GB/s"])
    base = "#c9c9c9"
    hi = IMPL_COLOR["triton"]

    def colors(i):
        return [hi if j == i else base for j in range(len(t))]

    fig.add_trace(go.Bar(x=t["label"], y=t["kernel_us"], marker_color=colors(0), showlegend=False,
                         customdata=np.stack([t["span_us"], t["gbps"], t["tflops"]], axis=-1),
                         hovertemplate="<b>%{x}</b><br>kernel %{y:.3g} us<br>span %{customdata[0]:.3g} us"
                                       "<br>%{customdata[1]:.0f} GB/s, %{customdata[2]:.3g} TFLOP/s<extra></extra>"),
                  row=1, col=1)
    xs = t["fmas_per_load"] if has_reuse else t["gbps"]
    fig.add_trace(go.Scatter(x=xs, y=t["kernel_us"], mode="markers", showlegend=False, text=t["label"],
                             marker=dict(color=colors(0), size=12, line=dict(color="#555", width=1)),
                             hovertemplate="<b>%{text}</b><br>%{x:.3g}<br>kernel %{y:.3g} us<extra></extra>"),
                  row=1, col=2)
    shape = t["shape"].iloc[0]
    ref = df[(df["op"] == op) & (df["impl"] == "pytorch") & (df["shape"] == shape) & (df["view"] == "kernel_time")
             & (df["stat"] == "mean") & (df["round"] == 0) & (df["dtype"] == "fp32") & (df["cache"] == "warm")]
    if len(ref):
        fig.add_hline(y=float(ref["value"].iloc[0]), line=dict(color=IMPL_COLOR["pytorch"], dash="dash"),
                      annotation_text="PyTorch eager", annotation_position="top left", row=1, col=1)

    def note(i):
        r = t.iloc[i]
        txt = f"<b>{r['label']}</b>: kernel {r['kernel_us']:.3g} us, span {r['span_us']:.3g} us"
        if has_reuse:
            txt += f"; per K step {int(r['loads']):,} loads serve {int(r['fmas']):,} multiply-adds " \
                   f"({r['fmas_per_load']:.3g} per load)"
        else:
            txt += f"; {r['gbps']:.0f} GB/s"
        return txt

    steps = []
    for i in range(len(t)):
        steps.append(dict(label=t["label"].iloc[i], method="update",
                          args=[{"marker.color": [colors(i), colors(i)]}, {"title.text": note(i)}, [0, 1]]))
    fig.update_layout(
        height=520, template="plotly_white", margin=dict(t=90, b=150),
        title=dict(text=note(0), x=0, font=dict(size=13)),
        sliders=[dict(active=0, steps=steps, x=0, y=-0.32, len=1.0, pad=dict(t=10),
                      currentvalue=dict(prefix="config: ", font=dict(size=12)))])
    fig.update_xaxes(tickangle=-45, tickfont=dict(size=9), row=1, col=1)
    fig.update_xaxes(type="log" if has_reuse else "linear", title_text="multiply-adds per load" if has_reuse
                     else "GB/s", row=1, col=2)
    blocks = " x ".join(k for k in BLOCK_ORDER if k in t.columns)
    return _caption(fig, f"{machine}, recorded Triton tile sweep of {OP_LABEL[op]} at {shape} ({tile_of} shape), "
                         f"warm cache, FP32. Labels: {blocks}, then warps (w), stages (s) and group (g). "
                         "Move the slider to pick a config; the numbers are recorded, no kernel runs.")


# ------------------------------------------------------------------------------------------ one op
def op_views(df: pd.DataFrame, op: str, machine: str, cache="warm", views=("kernel_time", "event_span", "launches")):
    """One operation in three views side by side, one bar group per field shape (neighbour aggregation
    has a uniform and a skewed graph)."""
    d = df[(df["op"] == op) & (df["shape_set"] == "field") & (df["cache"] == cache) & (df["dtype"] == "fp32")
           & (df["stat"] == "mean")]
    shapes = [ops.shape_key(s) for s in ops.OPS[op].shapes["field"] if ops.shape_key(s) in set(d["shape"])]
    fig = make_subplots(rows=1, cols=len(views), subplot_titles=[f"{VIEW_LABEL[v]} ({VIEW_UNIT[v]})" for v in views],
                        horizontal_spacing=0.07)
    palette = ["#2a7f62", "#b5651d", "#6a5acd"]
    for c, v in enumerate(views, start=1):
        for n, shape in enumerate(shapes):
            s = d[(d["shape"] == shape) & (d["view"] == v)]
            top = s[s["round"] == 0].set_index("impl")
            impls = _ordered(top.index, IMPL_ORDER)
            top = top.reindex(impls)
            rounds = s[s["round"] > 0].groupby("impl")["value"].agg(["min", "max"]).reindex(impls)
            err = None
            if rounds["min"].notna().any():
                err = dict(type="data", symmetric=False, array=(rounds["max"] - top["value"]).clip(lower=0).fillna(0).tolist(),
                           arrayminus=(top["value"] - rounds["min"]).clip(lower=0).fillna(0).tolist(), color="#333")
            fig.add_trace(go.Bar(
                x=[IMPL_LABEL.get(i, i) for i in impls], y=top["value"].tolist(), error_y=err, name=shape,
                legendgroup=shape, showlegend=c == 1 and len(shapes) > 1,
                marker_color=palette[n % len(palette)] if len(shapes) > 1 else [IMPL_COLOR.get(i, "#888") for i in impls],
                hovertemplate=f"%{{x}}<br>{VIEW_LABEL[v]} %{{y:.3g}} {VIEW_UNIT[v]}<br>shape {shape}<extra></extra>"),
                row=1, col=c)
        fig.update_xaxes(tickangle=-45, row=1, col=c)
        fig.update_yaxes(rangemode="tozero", row=1, col=c)
    fig.update_layout(barmode="group", height=520, template="plotly_white", margin=dict(t=110),
                      title=dict(text=f"{OP_LABEL[op]} in three views", x=0, y=0.98, yanchor="top"),
                      legend=dict(orientation="h", y=1.1, x=0, yanchor="bottom", font=dict(size=11)))
    return _caption(fig, caption("field", cache, machine, {op: " and ".join(shapes)},
                                 "FP32. Whiskers on event spans: range of the three round means."))


def amdahl(speedup: float, machine: str, shares=(0.05, 0.1, 0.2, 0.5, 0.9)):
    """Whole-request speed-up against a kernel's own speed-up, one line per share of the request, with
    a measured kernel speed-up marked."""
    s = np.logspace(0, 2, 200)
    fig = go.Figure()
    for p in shares:
        fig.add_trace(go.Scatter(x=s, y=1 / ((1 - p) + p / s), mode="lines", name=f"kernel is {p:.0%} of the request",
                                 hovertemplate=f"share {p:.0%}<br>kernel x%{{x:.3g}} -> request x%{{y:.3g}}<extra></extra>"))
    if speedup and math.isfinite(speedup) and speedup > 0:
        fig.add_vline(x=speedup, line=dict(color=IMPL_COLOR["triton"], dash="dash"),
                      annotation_text=f"fused bias + GELU, x{speedup:.2g}", annotation_position="top")
    fig.update_xaxes(type="log", title="speed-up of the kernel")
    fig.update_yaxes(title="speed-up of the request")
    fig.update_layout(height=440, template="plotly_white", title=dict(text="Amdahl's law", x=0))
    return _caption(fig, f"Curves: S = 1 / ((1 - p) + p / s). Dashed: the kernel-time speed-up of the fused Triton "
                         f"bias + GELU over eager PyTorch on {machine} (field shape, warm cache).")


def warm_cold(df: pd.DataFrame, machine: str, view="kernel_time"):
    """Cold-cache time over warm-cache time per implementation, one panel per operation: how much of
    each kernel's speed came from finding its inputs already in L2."""
    w, c = bars(df, cache="warm"), bars(df, cache="cold")
    m = w[w["view"] == view].merge(c[c["view"] == view], on=["op", "impl", "shape"], suffixes=("_warm", "_cold"))
    if m.empty:
        raise ValueError("no cold-cache measurements at the field shapes")
    m["ratio"] = m["value_cold"] / m["value_warm"]
    op_list = _ordered(m["op"], OP_ORDER)
    fig = make_subplots(rows=1, cols=len(op_list), subplot_titles=[OP_SHORT[o] for o in op_list], shared_yaxes=True,
                        horizontal_spacing=0.03)
    for i, op in enumerate(op_list, start=1):
        g = m[m["op"] == op].set_index("impl")
        g = g.reindex(_ordered(g.index, IMPL_ORDER))
        fig.add_trace(go.Bar(
            x=[IMPL_LABEL.get(x, x) for x in g.index], y=g["ratio"], showlegend=False,
            marker_color=[IMPL_COLOR.get(x, "#888") for x in g.index],
            customdata=np.stack([g["value_warm"], g["value_cold"], g["shape"]], axis=-1),
            hovertemplate="%{x}<br>cold / warm %{y:.3g}<br>warm %{customdata[0]:.3g} us, cold %{customdata[1]:.3g} us"
                          "<br>shape %{customdata[2]}<extra></extra>"), row=1, col=i)
        fig.update_xaxes(tickangle=-60, row=1, col=i)
    fig.add_hline(y=1, line=dict(color="#555", dash="dot"))
    fig.update_yaxes(title_text=f"cold / warm {VIEW_LABEL[view]}", row=1, col=1)
    fig.update_layout(height=460, template="plotly_white", title=dict(text="What a warm cache was worth", x=0))
    return _caption(fig, caption("field", "cold against warm", machine, {o: field_shape(df, o) for o in op_list},
                                 "Cold: each call finds its inputs evicted from L2 (rotating among enough input "
                                 "sets to overflow it). 1 means the cache made no difference."))
