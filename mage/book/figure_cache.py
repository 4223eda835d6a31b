"""What a warm cache was worth: each implementation's cold-cache time over its warm-cache time at the
field shapes, one panel per operation (a figure of ``mage.book.figures``, which re-exports it)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mage import views as V

from .figure_style import (VIEW_LABEL, caption, impl_color, impl_label, impls_in, not_measured, op_short, with_caption,
                           with_grid)


def warm_cold(df: pd.DataFrame, machine: str, view="kernel_time"):
    """Cold-cache time over warm-cache time per implementation, one panel per operation: how much of
    each kernel's speed came from finding its inputs already in L2."""
    w, c = V.bars(df, cache="warm"), V.bars(df, cache="cold")
    m = V.select(w, view=view).merge(V.select(c, view=view), on=["op", "impl", "shape"], suffixes=("_warm", "_cold"))
    if m.empty:
        return not_measured("What a warm cache was worth", machine, "cold-cache runs at the field shapes")
    m["ratio"] = m["value_cold"] / m["value_warm"]
    op_list = V.ops_in(m["op"])
    seen = set()
    fig = make_subplots(rows=1, cols=len(op_list), subplot_titles=[op_short(o) for o in op_list], shared_yaxes=True,
                        horizontal_spacing=0.03)
    for i, op in enumerate(op_list, start=1):
        g = V.select(m, op=op).set_index("impl")
        g = g.reindex(impls_in(g.index, op))
        for impl, r in g.iterrows():
            fig.add_trace(go.Bar(
                x=[impl], y=[r["ratio"]], name=impl_label(impl), legendgroup=impl, showlegend=impl not in seen,
                marker_color=impl_color(impl), marker_line=dict(color="#333", width=0.6),
                customdata=[[r["value_warm"], r["value_cold"], r["shape"], impl_label(impl)]],
                hovertemplate="%{customdata[3]}<br>cold / warm %{y:,.3~r}<br>warm %{customdata[0]:,.3~r} µs, cold "
                              "%{customdata[1]:,.3~r} µs<br>shape %{customdata[2]}<extra></extra>"), row=1, col=i)
            seen.add(impl)
        fig.update_xaxes(showticklabels=False, row=1, col=i)
    fig.add_hline(y=1, line=dict(color="#555", dash="dot"))
    fig.update_yaxes(title_text=f"cold / warm {VIEW_LABEL[view]}", row=1, col=1)
    fig.update_layout(height=440, template="plotly_white", barmode="overlay",
                      title=dict(text="What a warm cache was worth", x=0),
                      legend=dict(orientation="h", x=0, y=-0.05, yanchor="top"))
    fig.layout.meta = {"narrow": {"margin.l": 45, "margin.r": 8}, "narrow_height": 480, "narrow_font": 9}
    with_grid(fig, ["panel"], "name", ["operation"])
    return with_caption(fig, caption("field", "cold against warm", machine, {o: V.first_shape(df, o) for o in op_list},
                                     "Cold: each call finds its inputs evicted from L2 (rotating among enough input "
                                     "sets to overflow it). 1 means the cache made no difference."))
