"""Figures of cost against the card's limits: the roofline, cost against size over the sweeps, and what
each launch path adds to the kernel time. Data comes from ``mage.views``; names from the facets and the
registry."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mage import facets
from mage import views as V
from .figure_style import (VIEW_LABEL, caption, impl_color, impl_info, impl_label, impls_in, not_measured,
                           op_label, op_short, plain, with_caption, with_grid)
from mage.ops import OPS


def ceiling_or_none(ceilings: pd.DataFrame, name: str):
    """The newest reading of one ceiling, or None when the run did not measure it."""
    v = V.ceiling(ceilings, name)
    return v if math.isfinite(v) else None


def roofline(df: pd.DataFrame, ceilings: pd.DataFrame, machine: str, shape_sets=("field", "large"), cache="warm"):
    """Achieved GFLOP/s against arithmetic intensity (FLOPs per compulsory byte), under the roofs of the
    card's measured copy bandwidth and FP32 rate."""
    bw, rate = ceiling_or_none(ceilings, "copy_gbps"), ceiling_or_none(ceilings, "fp32_tflops")
    d = V.headline(df, view="kernel_time", dtype="fp32", cache=cache, shape_set=list(shape_sets))
    d = d[(d["flops"] > 0) & (d["bytes"] > 0) & (d["value"] > 0)].copy()
    if d.empty or bw is None or rate is None:
        return not_measured("Roofline", machine, "kernel times with their ceilings (copy bandwidth, FP32 rate)")
    peak = rate * 1e3  # GFLOP/s
    d["ai"] = d["flops"] / d["bytes"]
    d["gflops"] = d["flops"] / (d["value"] * 1e3)
    fig = go.Figure()
    lo = max(min(d["ai"].min(), peak / bw) / 4, 1e-3)
    hi = max(d["ai"].max(), peak / bw) * 4
    x = np.logspace(math.log10(lo), math.log10(hi), 200)
    fig.add_trace(go.Scatter(x=x, y=np.minimum(bw * x, peak), mode="lines", line=dict(color="#444", width=2),
                             name=f"roof: {bw:.0f} GB/s copy, {peak / 1e3:.1f} TFLOP/s FP32", meta={"table": False},
                             hovertemplate="AI %{x:,.3~r} FLOP/B<br>roof %{y:,.4~r} GFLOP/s<extra></extra>"))
    marker = {o: facets.get(o, "marker", "circle") for o in OPS}
    for impl in impls_in(d["impl"]):
        g = V.select(d, impl=impl)
        fig.add_trace(go.Scatter(
            x=g["ai"], y=g["gflops"], mode="markers", name=impl_label(impl),
            marker=dict(color=impl_color(impl), size=[9 if s == "field" else 13 for s in g["shape_set"]],
                        symbol=[marker.get(o, "circle") for o in g["op"]], line=dict(width=1, color="white")),
            customdata=np.stack([g["op"].map(op_label), g["shape"], g["value"],
                                 100 * g["gflops"] / np.minimum(bw * g["ai"], peak)], axis=-1),
            hovertemplate="<b>%{customdata[0]}</b> " + impl_label(impl) +
                          "<br>shape %{customdata[1]}<br>%{customdata[2]:,.3~r} µs, %{y:,.4~r} GFLOP/s"
                          "<br>%{customdata[3]:.0f}% of the roof<extra></extra>"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOPs per compulsory byte)")
    fig.update_yaxes(type="log", title="achieved GFLOP/s (kernel time)")
    fig.update_layout(height=560, template="plotly_white", title=dict(text="Roofline", x=0),
                      legend=dict(font=dict(size=11)))
    fig.layout.meta = {"narrow": {"legend.orientation": "h", "legend.y": -0.25, "legend.yanchor": "top",
                                  "margin.l": 45, "margin.r": 8}, "narrow_height": 620}
    shown = V.ops_in(d["op"])
    legend = ", ".join(f"{marker.get(o, 'circle').split('-')[0]} {op_label(o)}" for o in shown)
    return with_caption(fig, caption(" and ".join(shape_sets), cache, machine,
                                     extra=f"Marker shape: operation ({legend}); small markers field shapes, large "
                                           "markers large shapes. Roofs are this card's measured copy bandwidth and "
                                           "FP32 rate of a dense matrix product, not datasheet peaks, measured once per run. The FP32 "
                                           "roof is the FMA units' rate: a point well above it runs on the tensor "
                                           "cores (a bf16 or split-precision GEMM), a different roof."))


def cost_vs_size(df: pd.DataFrame, ceilings: pd.DataFrame, machine: str, cache="warm", op_list=None):
    """The sweeps: time against compulsory bytes (or FLOPs, for an op whose spec says its work is
    FLOPs), one panel per operation, with the floor (bytes over bandwidth or FLOPs over rate) and an
    empty kernel's cost drawn. Buttons switch between kernel time and event span."""
    d = V.headline(df, shape_set="sweep", dtype="fp32", cache=cache, view=["kernel_time", "event_span"])
    op_list = [o for o in (op_list or V.ops_in(d["op"])) if o in set(d["op"])]
    views = [v for v in ("kernel_time", "event_span") if v in set(d["view"])]
    if not op_list or not views:
        return not_measured("Cost against size", machine, f"the size sweep ({cache} cache)")
    ncols = min(3, len(op_list))
    nrows = math.ceil(len(op_list) / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[op_label(o) for o in op_list],
                        horizontal_spacing=0.08, vertical_spacing=0.2)
    owner = []
    empty = {"kernel_time": ceiling_or_none(ceilings, "empty_kernel_us"),
             "event_span": ceiling_or_none(ceilings, "empty_span_us")}
    seen, narrow_ticks = set(), {}
    for n, op in enumerate(op_list):
        rc = dict(row=n // ncols + 1, col=n % ncols + 1)
        g = V.select(d, op=op)
        xcol = "flops" if op in OPS and facets.get(op, "work", "bytes") == "flops" else "bytes"
        for v in views:
            for impl in impls_in(g["impl"], op):
                s = V.select(g, impl=impl, view=v).sort_values(xcol)
                if s.empty:
                    continue
                fig.add_trace(go.Scatter(
                    x=s[xcol], y=s["value"], mode="lines+markers", name=impl_label(impl),
                    legendgroup=impl, showlegend=impl not in seen, visible=v == views[0],
                    line=dict(color=impl_color(impl)), marker=dict(size=6),
                    customdata=np.stack([s["shape"], s["floor_us"]], axis=-1),
                    hovertemplate=f"<b>{impl_label(impl)}</b><br>shape %{{customdata[0]}}"
                                  f"<br>{VIEW_LABEL[v]} %{{y:,.3~r}} µs<br>floor %{{customdata[1]:,.3~r}} µs<extra></extra>"),
                    **rc)
                seen.add(impl)
                owner.append(v)
            floor = V.select(g, view=v).drop_duplicates("shape").sort_values(xcol)
            fig.add_trace(go.Scatter(x=floor[xcol], y=floor["floor_us"], mode="lines", name="floor",
                                     legendgroup="floor", showlegend="floor" not in seen, visible=v == views[0],
                                     line=dict(color="black", dash="dash", width=1.5),
                                     hovertemplate="floor %{y:,.3~r} µs<extra></extra>"), **rc)
            seen.add("floor")
            owner.append(v)
            if empty.get(v) and len(floor):
                fig.add_trace(go.Scatter(x=[floor[xcol].min(), floor[xcol].max()], y=[empty[v]] * 2, mode="lines",
                                         name="empty kernel", legendgroup="empty", showlegend="empty" not in seen,
                                         visible=v == views[0], line=dict(color="#999", dash="dot", width=1.5),
                                         hovertemplate=f"empty kernel, {VIEW_LABEL[v]}: %{{y:,.3~r}} µs<extra></extra>"),
                              **rc)
                seen.add("empty")
                owner.append(v)
        # a label a decade (every other one over more than five): plotly's digit labels between decades
        # and its tilted labels ran into their neighbours
        xs = g[xcol][g[xcol] > 0]
        decades = math.log10(xs.max() / xs.min()) if len(xs) else 0
        fig.update_xaxes(type="log", dtick=2 if decades > 5 else 1, tickangle=0,
                         title_text="FLOPs" if xcol == "flops" else "bytes", **rc)
        ax = "xaxis" if n == 0 else f"xaxis{n + 1}"
        narrow_ticks.update({f"{ax}.dtick": 3 if decades > 5 else 2, f"{ax}.tickfont.size": 9})
        fig.update_yaxes(type="log", dtick=1, title_text="µs" if rc["col"] == 1 else None, **rc)
    fig.update_layout(
        height=330 * nrows + 220, template="plotly_white", margin=dict(t=130),
        title=dict(text=f"Cost against size, {VIEW_LABEL[views[0]]}", x=0, y=0.99, yanchor="top"),
        legend=dict(orientation="h", y=-0.1, yanchor="top"),
        meta={"narrow": {"margin.l": 45, "margin.r": 8, **narrow_ticks,  # short panel titles: long ones ran together
                         **{f"annotations.{i}.text": op_short(o) for i, o in enumerate(op_list)}},
              "narrow_height": 700, "narrow_font": 10},
        updatemenus=[dict(type="buttons", direction="right", active=0, x=0, y=1.07, xanchor="left", yanchor="bottom",
                          buttons=[dict(label=VIEW_LABEL[v], method="update",
                                        args=[{"visible": [o == v for o in owner]},
                                              {"title.text": f"Cost against size, {VIEW_LABEL[v]}"}])
                                   for v in views])])
    with_grid(fig, ["view", "panel", "x"], "name", ["view", "operation", "size (bytes or FLOPs)"])
    return with_caption(fig, caption("sweep", cache, machine, extra="FP32. Dashed: the floor, the larger of compulsory "
                                     "bytes over measured copy bandwidth and FLOPs over measured FP32 rate; dotted: "
                                     "an empty kernel measured the same way."))


PATH_VIEWS = ("event_span", "graph_span")  # a call launched directly, and replayed from a CUDA graph


def _path_label(impl: str, view: str) -> str:
    return impl_label(impl) if view == "event_span" else f"graph replay: {impl_label(impl)}"


def launch_overhead(df: pd.DataFrame, cache="warm") -> pd.DataFrame:
    """Span minus kernel time per (op, launch path). An implementation that shares another's kernels
    (``Impl.kernels_of``: the same PTX, launched another way) is charged that one's kernel time."""
    b = V.bars(df, cache=cache)
    rows = []
    for op in V.ops_in(b["op"]):
        s = V.select(b, op=op).set_index(["impl", "view"])["value"]
        impls = impls_in(s.index.get_level_values("impl"), op)
        for view in PATH_VIEWS:
            for impl in impls:
                if (impl, view) not in s.index:
                    continue
                info = impl_info(impl)
                kimpl = info.kernels_of if info is not None and info.kernels_of else impl
                if (kimpl, "kernel_time") not in s.index:
                    continue
                span, kern = s[(impl, view)], s[(kimpl, "kernel_time")]
                rows.append(dict(op=op, impl=impl, view=view, path=_path_label(impl, view), span_us=span,
                                 kernel_us=kern, overhead_us=span - kern, launches=s.get((kimpl, "launches"), math.nan)))
    return pd.DataFrame(rows, columns=["op", "impl", "view", "path", "span_us", "kernel_us", "overhead_us", "launches"])


def launch_paths(df: pd.DataFrame, ceilings: pd.DataFrame, machine: str, cache="warm"):
    """Span minus kernel time for each launch path, one panel per operation; the dotted line is an empty
    kernel's span minus its kernel time."""
    lo = launch_overhead(df, cache=cache)
    op_list = V.ops_in(lo["op"])
    if not op_list:
        return not_measured("What the launch path costs", machine, "spans with their kernel times at the field shapes")
    fig = make_subplots(rows=len(op_list), cols=1, vertical_spacing=0.05, subplot_titles=[op_label(o) for o in op_list])
    empty = None
    es, ek = ceiling_or_none(ceilings, "empty_span_us"), ceiling_or_none(ceilings, "empty_kernel_us")
    if es is not None and ek is not None:
        empty = es - ek
    for r, op in enumerate(op_list, start=1):
        g = V.select(lo, op=op)
        colors = [impl_color(i) if v == "event_span" else "#5b8c5a" for i, v in zip(g["impl"], g["view"])]
        fig.add_trace(go.Bar(
            y=g["path"], x=g["overhead_us"], orientation="h", marker_color=colors, showlegend=False,
            text=[plain(v) for v in g["overhead_us"]], textposition="outside", cliponaxis=False,
            customdata=np.stack([g["span_us"], g["kernel_us"], g["launches"]], axis=-1),
            hovertemplate="<b>%{y}</b><br>span - kernel: %{x:,.3~r} µs<br>span %{customdata[0]:,.3~r} µs, kernel "
                          "%{customdata[1]:,.3~r} µs<br>launches per call %{customdata[2]:,.3~r}<extra></extra>"),
            row=r, col=1)
        if empty is not None:
            fig.add_vline(x=empty, line=dict(color="#999", dash="dot"), row=r, col=1)
        fig.update_yaxes(autorange="reversed", row=r, col=1)
        # room inside the plot for a label beside a negative bar (a replay a hair under its kernel time),
        # which otherwise ran into the path names
        lo_x, hi_x = min(0.0, float(g["overhead_us"].min())), max(0.0, float(g["overhead_us"].max()))
        pad = 0.18 * (hi_x - lo_x or 1.0)
        fig.update_xaxes(title_text="µs" if r == len(op_list) else None, row=r, col=1,
                         range=[lo_x - (pad if lo_x < 0 else 0), hi_x + pad])
    fig.layout.meta = {"narrow": {"margin.l": 120, "margin.r": 30}, "narrow_height": 180 * len(op_list),
                       "narrow_font": 10}
    fig.update_layout(height=300 * len(op_list), template="plotly_white", margin=dict(t=60, l=170),
                      title=dict(text="What the launch path costs: span minus kernel time", x=0))
    extra = "Green: CUDA-graph replay (the same kernels, launched as one graph)."
    if empty is not None:
        extra += f" Dotted: an empty kernel's span minus its kernel time ({empty:.3g} µs)."
    with_grid(fig, ["panel"], "x", ["operation"])
    return with_caption(fig, caption("field", cache, machine, {o: V.first_shape(df, o) for o in op_list}, extra))
