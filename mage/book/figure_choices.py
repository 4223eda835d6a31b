"""The precision map: kernel time against error against float64, one marker per (implementation,
precision) from ``mage.book.choices.table``, so the trade a reader makes by choosing a precision is one glance:
left is faster, down is more accurate. The dotted lines are the precisions' tolerances."""
from __future__ import annotations

import math

import plotly.graph_objects as go

from mage.ops import PRECISIONS

from .choices import table
from .figure_style import caption, impl_color, impl_label, not_measured, with_caption

SYMBOL = {"fp32": "circle", "fp32x3": "diamond", "tf32": "square", "bf16": "triangle-up"}


def precision_map(df, checks, ceilings, op: str, machine: str, shape_set: str = "large"):
    t, shape = table(df, checks, ceilings, op, shape_set, label=lambda i: i)
    t = t[t["error against float64"].map(lambda e: isinstance(e, float) and math.isfinite(e) and e > 0)]
    if t.empty:
        return not_measured("Time against accuracy", machine, "kernel times with their checked errors")
    fig = go.Figure()
    for _, r in t.iterrows():
        fig.add_trace(go.Scatter(
            x=[r["kernel time (µs)"]], y=[r["error against float64"]], mode="markers+text",
            name=f"{impl_label(r['implementation'])}, {r['precision']}", text=[r["precision"]],
            textposition="top center", marker=dict(size=13, color=impl_color(r["implementation"]),
                                                   symbol=SYMBOL.get(r["precision"], "circle"),
                                                   line=dict(width=1, color="#333")),
            hovertemplate=(f"<b>{impl_label(r['implementation'])}</b>, {r['precision']}<br>%{{x:,.0f}} µs<br>"
                           f"error %{{y:.2g}} (tolerance {r['tolerance']:.0e})<br>"
                           f"{r['bits kept']} significand bits kept<extra></extra>")))
    for name in sorted({p for p in t["precision"]}, key=list(PRECISIONS).index):
        tol = PRECISIONS[name].tolerance
        fig.add_hline(y=tol, line=dict(color="#bbb", dash="dot"), annotation_text=f"{name} tolerance",
                      annotation_position="bottom right", annotation_font_size=10)
    fig.update_xaxes(type="log", title_text="kernel time (µs), log scale")
    fig.update_yaxes(type="log", title_text="relative error against float64, log scale")
    fig.layout.meta = {"narrow": {"margin.l": 60, "margin.r": 10}, "narrow_height": 420, "narrow_font": 10}
    fig.update_layout(height=460, template="plotly_white", margin=dict(t=60, l=80),
                      legend=dict(orientation="h", y=-0.2), title=dict(text="Time against accuracy", x=0))
    return with_caption(fig, caption(shape_set, "warm", machine, {op: shape},
                                     "Errors are the largest over the normal and heavy-tailed checks."))
