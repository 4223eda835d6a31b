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
CHECK_WORDS = {"normal": "the forward pass on normal inputs", "grad": "the backward pass"}


def precision_map(df, checks, ceilings, op: str, machine: str, shape_set: str = "large"):
    t, shape = table(df, checks, ceilings, op, shape_set, label=lambda i: i)
    t = t[t["error against float64"].map(lambda e: isinstance(e, float) and math.isfinite(e) and e > 0)]
    if t.empty:
        return not_measured("Time against accuracy", machine, "kernel times with their checked errors")
    fig = go.Figure()
    for _, r in t.iterrows():
        fig.add_trace(go.Scatter(
            # named by the legend, not by text beside the marker: the bf16 markers of three columns sit
            # within a few pixels of one another, and their labels overprinted
            x=[r["kernel time (µs)"]], y=[r["error against float64"]], mode="markers",
            name=f"{impl_label(r['implementation'])}, {r['precision']}",
            marker=dict(size=13, color=impl_color(r["implementation"]), symbol=SYMBOL.get(r["precision"], "circle"),
                        line=dict(width=1, color="#333")),
            hovertemplate=(f"<b>{impl_label(r['implementation'])}</b>, {r['precision']}<br>%{{x:,.0f}} µs<br>"
                           f"error %{{y:.2g}} (tolerance {r['tolerance']:.0e})<br>"
                           f"{r['bits kept']} significand bits kept<extra></extra>")))
    # One line per distinct tolerance, naming every precision that shares it (two labels on one line
    # overprinted as "fp3t32 tolerance").
    shared = {}
    for name in sorted({p for p in t["precision"]}, key=list(PRECISIONS).index):
        shared.setdefault(PRECISIONS[name].tolerance, []).append(name)
    for tol, names in shared.items():
        fig.add_hline(y=tol, line=dict(color="#bbb", dash="dot"))
        # placed by hand: on a log axis add_hline's own label lands at the top of the plot, all of them
        # on one another
        fig.add_annotation(text=f"{' and '.join(names)} tolerance", xref="paper", x=1, xanchor="right",
                           yref="y", y=math.log10(tol), yanchor="bottom", showarrow=False, font=dict(size=10))
    fig.update_xaxes(type="log", dtick=1, title_text="kernel time (µs), log scale")  # (a label a decade)
    fig.update_yaxes(type="log", dtick=1, title_text="relative error against float64, log scale", exponentformat="power")
    # On a phone: shorter axis titles (the long ones were cut off) and the legend's fourteen entries in
    # rows under the plot (as a column they overflowed into a scrolling box).
    fig.layout.meta = {"narrow": {"margin.l": 60, "margin.r": 10, "yaxis.title.text": "error against float64",
                                  "xaxis.title.text": "kernel time (µs)", "legend.orientation": "h",
                                  "legend.font.size": 9, "legend.y": -0.15, "legend.yanchor": "top", "height": 720},
                       "narrow_height": 720, "narrow_font": 10}
    # the legend hangs from below the x axis's title (anchored at its top: anchored at its bottom, a
    # longer legend grew up over the title)
    fig.update_layout(height=540, template="plotly_white", margin=dict(t=60, l=80),
                      legend=dict(orientation="h", y=-0.2, yanchor="top"), title=dict(text="Time against accuracy", x=0))
    kinds = sorted(set(checks.loc[checks["op"] == op, "dist"]), key=lambda k: (k not in CHECK_WORDS, k)) \
        if checks is not None and "dist" in checks else []
    what = " and ".join(CHECK_WORDS.get(k, k) for k in kinds) or "the recorded checks"
    return with_caption(fig, caption(shape_set, "warm", machine, {op: shape},
                                     f"Errors: the largest over the recorded checks ({what})."))
