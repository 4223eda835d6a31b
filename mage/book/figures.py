"""The book's figures: one function per kind, each taking tidy DataFrames (and ceilings) and returning a
plotly Figure, so a page cell is one call and the same figures can be made outside the book.

Figures only draw: what they show is selected by ``mage.views`` (one statistic per case), and names,
colours and order come from the facets and the registry (``mage.book.figure_style``). A figure whose data the
card did not record says so instead of failing. The figure modules (``figures``, ``figure_*``) are the
only ones that import plotly; the measuring code never does.

    from mage.book import figures
    from mage import load
    figures.main(load("data/h200"), "H200").show()
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mage import views as V
from .figure_cache import warm_cold  # noqa: F401 - the one namespace
from .figure_costs import cost_vs_size, launch_overhead, launch_paths, roofline  # noqa: F401
from .figure_choices import precision_map  # noqa: F401
from .figure_launch import launch_breakdown  # noqa: F401
from .figure_op import op_views, view_menu  # noqa: F401
from .figure_style import (NOT_MEASURED, PUBLISHED_LABEL, US, VIEW_LABEL, VIEW_UNIT, caption, fmt,  # noqa: F401
                           impl_bars, impl_color, impl_label, impls_in, kernel_list, log_toggle, not_measured,
                           op_label, op_short, short_label, use_notebook_renderer, with_caption, with_grid)
from .figure_tiles import config_label, reuse, tile_explorer, tile_table  # noqa: F401
from .figure_train import passes as train_passes, steps as train_steps  # noqa: F401

bars = V.bars
field_shape = V.first_shape


def _axis(kind: str, n: int) -> str:
    return f"{kind}axis{'' if n == 1 else n}"


def main(df: pd.DataFrame, machine: str, cache="warm", views=("kernel_time", "event_span", "launches", "graph_span")):
    """One row per operation, each on its own y scale; one bar per implementation (its colour in every
    figure); whiskers for the range of the three round means (event spans); buttons switch the view,
    and a log scale is offered when one bar dwarfs the rest of its row."""
    b = V.bars(df, cache=cache)
    op_list = V.ops_in(b["op"])
    views = [v for v in views if v in set(b["view"])]
    if not op_list or not views:
        return not_measured("The operations", machine, f"no field-shape measurements ({cache} cache)")
    n_ops = len(op_list)
    title = f"{'Five' if n_ops == 5 else n_ops} operation{'s' if n_ops != 1 else ''}"
    fig = make_subplots(rows=n_ops, cols=1, vertical_spacing=0.07,
                        subplot_titles=[f"{op_label(o)} ({V.first_shape(df, o)})" for o in op_list])
    impls_of = {op: impls_in(V.select(b, op=op)["impl"], op) for op in op_list}
    owner = []
    for v in views:
        seen = set()
        for r, op in enumerate(op_list, start=1):
            before = len(fig.data)
            impl_bars(fig, V.select(b, op=op, view=v), impls_of[op], v, r, 1, seen, visible=v == views[0])
            owner += [v] * (len(fig.data) - before)
    buttons = []
    for v in views:
        layout = {f"{_axis('y', r)}.title.text": VIEW_UNIT[v] for r in range(1, n_ops + 1)}
        layout["title.text"] = f"{title}, {VIEW_LABEL[v]}"
        buttons.append(dict(label=VIEW_LABEL[v], method="update",
                            args=[{"visible": [o == v for o in owner]}, layout]))
    fig.update_layout(
        height=240 * n_ops + 140, bargap=0.25, barmode="overlay", margin=dict(t=130, l=60, r=20, b=40),
        showlegend=False, legend=dict(orientation="h", x=0, y=1.0, xanchor="left", yanchor="bottom"),
        title=dict(text=f"{title}, {VIEW_LABEL[views[0]]}", x=0, y=0.995, yanchor="top"),
        updatemenus=[dict(type="buttons", direction="right", buttons=buttons, active=0, x=0, y=1.0,
                          xanchor="left", yanchor="bottom", pad=dict(b=40), showactive=True)],
        template="plotly_white")
    for r, op in enumerate(op_list, start=1):
        fig.update_xaxes(categoryorder="array", categoryarray=impls_of[op], row=r, col=1, tickangle=0,
                         tickvals=impls_of[op], ticktext=[short_label(i) for i in impls_of[op]])
        fig.update_yaxes(title_text=VIEW_UNIT[views[0]], rangemode="tozero", row=r, col=1)
    ratios = []
    for op in op_list:  # a log scale where one bar of a row dwarfs another of the same row
        for v in views:
            vals = V.select(b, op=op, view=v)["value"]
            vals = vals[vals > 0]
            if len(vals) > 1:
                ratios.append(vals.max() / vals.min())
    if ratios:
        log_toggle(fig, [1.0, max(ratios)], [_axis("y", r) for r in range(1, n_ops + 1)])
    narrow = {f"{_axis('x', r)}.showticklabels": False for r in range(1, n_ops + 1)}
    # On a phone the legend names the bars; it sits at the top of the figure, above the first row's title.
    narrow.update({"showlegend": True, "margin.l": 45, "margin.r": 8, "margin.b": 20, "legend.yref": "container",
                   "legend.y": 1.0, "legend.yanchor": "top", "legend.font.size": 10})
    fig.layout.meta = {"narrow": narrow, "narrow_height": 150 * n_ops + 160, "narrow_top": 130, "top": 40,
                       "narrow_font": 10, "per_impl": True, "grid": {"by": ["view", "panel"], "across": "name",
                                                             "heads": ["view", "operation"]}}
    shapes = {o: V.first_shape(df, o) for o in op_list}
    return with_caption(fig, caption("field", cache, machine, shapes,
                                     "FP32, forward only. Bars: mean; whiskers: range of the three round means "
                                     "(event spans only, not a confidence interval). Each row has its own scale."))


def combined(df: pd.DataFrame, machine: str, cache="warm"):
    """Top row time inside the kernels, bottom row time around the call; one column per operation, each
    column on its own scale (shared by its two rows, so the gap between views reads directly). Bars are
    named by the legend (one colour per implementation), not by tick labels."""
    b = V.select(V.bars(df, cache=cache), view=["kernel_time", "event_span"])
    op_list = V.ops_in(b["op"])
    if not op_list:
        return not_measured("Inside the kernels and around the call", machine,
                            f"no field-shape kernel times or spans ({cache} cache)")
    n = len(op_list)
    fig = make_subplots(rows=2, cols=n, shared_yaxes="columns", vertical_spacing=0.1,
                        horizontal_spacing=0.05 if n > 3 else 0.08,
                        subplot_titles=[op_short(o) for o in op_list] + [""] * n,
                        row_titles=[f"kernel time ({US})", f"event span ({US})"])
    seen, values = set(), []
    for c, op in enumerate(op_list, start=1):
        impls = impls_in(V.select(b, op=op)["impl"], op)
        for r, v in enumerate(("kernel_time", "event_span"), start=1):
            rows = V.select(b, op=op, view=v)
            values += list(rows["value"])
            before = len(fig.data)
            impl_bars(fig, rows, impls, v, r, c, seen, text=False)
            for t in fig.data[before:]:  # (the values table's row: the bottom row's panels have no title)
                t.meta = {**t.meta, "panel": op_label(op)}
            fig.update_xaxes(categoryorder="array", categoryarray=impls, showticklabels=False, row=r, col=c)
        fig.update_yaxes(rangemode="tozero", col=c)
    fig.update_annotations(font_size=12)
    fig.update_layout(height=620, template="plotly_white", barmode="overlay", margin=dict(t=60, l=50, r=40, b=40),
                      legend=dict(orientation="h", x=0, y=-0.04, xanchor="left", yanchor="top"),
                      title=dict(text="Inside the kernels (top) and around the call (bottom)", x=0))
    by_col = {}
    for op in op_list:
        vals = V.select(b, op=op)["value"]
        vals = vals[vals > 0]
        if len(vals) > 1:
            by_col[op] = vals.max() / vals.min()
    if by_col:
        log_toggle(fig, [1.0, max(by_col.values())], [_axis("y", i) for i in range(1, 2 * n + 1)])
    # On a phone a column's tick labels need more room than its neighbour leaves: wider gaps, narrower columns.
    narrow = {"margin.l": 30, "margin.r": 18, "legend.y": -0.06}
    gap = 0.075 if n > 3 else 0.1
    width = (1 - gap * (n - 1)) / n
    for c in range(n):
        for r in range(2):
            narrow[f"{_axis('x', r * n + c + 1)}.domain"] = [c * (width + gap), c * (width + gap) + width]
    fig.layout.meta = {"narrow": narrow, "narrow_height": 560, "narrow_font": 9}
    with_grid(fig, ["view", "panel"], "name", ["view", "operation"])
    return with_caption(fig, caption("field", cache, machine, {o: V.first_shape(df, o) for o in op_list},
                                     "FP32. Each column has its own scale, shared by its two rows."))


def amdahl(speedup: float, machine: str, label: str = "the kernel", what: str = "the kernel",
           color: str = "#444444", shares=(0.05, 0.1, 0.2, 0.5, 0.9)):
    """Whole-request speed-up against a kernel's own speed-up, one line per share of the request, with
    a measured kernel speed-up marked (``label`` beside the line, ``what`` in the caption)."""
    s = np.logspace(0, 2, 200)
    fig = go.Figure()
    for p in shares:
        fig.add_trace(go.Scatter(x=s, y=1 / ((1 - p) + p / s), mode="lines", name=f"kernel is {p:.0%} of the request",
                                 meta={"table_step": 40},
                                 hovertemplate=f"share {p:.0%}<br>kernel x%{{x:,.3~r}} -> request x%{{y:,.3~r}}<extra></extra>"))
    marked = bool(speedup and math.isfinite(speedup) and speedup > 0)
    if marked:
        fig.add_vline(x=speedup, line=dict(color=color, dash="dash"),
                      annotation_text=f"{label}, x{speedup:.2g}", annotation_position="top")
    fig.update_xaxes(type="log", title="speed-up of the kernel")
    fig.update_yaxes(title="speed-up of the request")
    fig.update_layout(height=440, template="plotly_white", title=dict(text="Amdahl's law", x=0),
                      legend=dict(orientation="h", x=0, y=-0.2, yanchor="top"))
    fig.layout.meta = {"narrow": {"margin.l": 45, "margin.r": 10}, "narrow_height": 460}
    mark = (f"Dashed: the kernel-time speed-up of {what} on {machine} (field shape, warm cache)." if marked else
            f"The speed-up of {what} was not measured on {machine}.")
    return with_caption(fig, f"Curves: S = 1 / ((1 - p) + p / s). {mark}")


def cards(df: pd.DataFrame, published: pd.DataFrame, machine: str, cache="warm", first: str = "kernel_time"):
    """The original note's published RTX 4090 figures beside this card's, one column per operation, for
    the implementations the published figures have; the card's toggle switches the view (``first`` shown)."""
    views = ["kernel_time", "event_span", "launches"]
    pub = V.headline(published, round=0, view=views)
    impls = impls_in(pub["impl"])
    ours = V.select(V.bars(df, cache=cache), view=views, impl=impls)
    op_list = V.ops_in(list(pub["op"]) + list(ours["op"]))
    views = [v for v in views if v in set(pub["view"]) | set(ours["view"])]
    if not op_list or not views:
        return not_measured(f"{PUBLISHED_LABEL} against {machine}", machine, "the published figures")
    first = first if first in views else views[0]
    fig = make_subplots(rows=1, cols=len(op_list), horizontal_spacing=0.05,
                        subplot_titles=[op_short(o) for o in op_list])
    owner = []
    for v in views:
        for c, op in enumerate(op_list, start=1):
            for label, src, color in ((PUBLISHED_LABEL, pub, "#9a9a9a"), (machine, ours, "#2a7f62")):
                s = V.select(src, op=op, view=v).set_index("impl")
                s = s.reindex([i for i in impls if i in s.index])
                fig.add_trace(go.Bar(
                    x=[short_label(i) for i in s.index], y=s["value"].tolist(), name=label, legendgroup=label,
                    showlegend=c == 1, visible=v == first, marker_color=color,
                    marker_pattern_shape="/" if label == PUBLISHED_LABEL else "",
                    meta={"series": label, "unit": VIEW_UNIT[v]},
                    customdata=np.stack([s["shape"].astype(str).tolist()], axis=-1) if len(s) else None,
                    hovertemplate=f"<b>{label}</b> %{{x}}<br>%{{y:,.3~r}} {VIEW_UNIT[v]}<br>shape %{{customdata[0]}}"
                                  "<extra></extra>"), row=1, col=c)
                owner.append(v)
            fig.update_yaxes(rangemode="tozero", row=1, col=c)
            fig.update_xaxes(tickangle=0, tickfont=dict(size=9), row=1, col=c)
    title = f"{PUBLISHED_LABEL} against {machine}"
    # On a phone a column is about 60 px for three bar pairs: the names would overprint, so the ticks
    # become the labels' initials, spelled out in the caption.
    initials = _initials(impls)
    narrow = {"margin.l": 35, "margin.r": 10, "legend.font.size": 10}
    gap = 0.09  # on a phone, room between columns for each one's tick labels (they sat on the bars before)
    width = (1 - gap * (len(op_list) - 1)) / len(op_list)
    for c in range(1, len(op_list) + 1):
        ax = _axis("x", c)
        narrow.update({f"{ax}.tickmode": "array", f"{ax}.tickvals": [short_label(i) for i in impls],
                       f"{ax}.ticktext": [initials[i] for i in impls],
                       f"{ax}.domain": [(c - 1) * (width + gap), (c - 1) * (width + gap) + width],
                       f"annotations.{c - 1}.x": (c - 1) * (width + gap) + width / 2})  # (its title over it)
    fig.layout.meta = {"narrow": narrow, "narrow_height": 420, "narrow_font": 9, "per_impl": True}
    with_grid(fig, ["view", "panel", "series"], "x", ["view", "operation", "card"])
    fig.update_layout(barmode="group", height=440, template="plotly_white", margin=dict(t=60, b=40),
                      title=dict(text=f"{title}, {VIEW_LABEL[first]}", x=0, y=0.99, yanchor="top"),
                      legend=dict(orientation="h", y=-0.2, x=0, xanchor="left", yanchor="top"),
                      updatemenus=[view_menu(owner, views, title, ["yaxis"], first)])
    fig.update_yaxes(title_text=VIEW_UNIT[first], row=1, col=1)
    order = ", ".join(f"{impl_label(i)} ({initials[i]})" for i in impls)
    return with_caption(fig, f"Hatched grey: the original note's published RTX 4090 figures (WSL, FP32; shapes not "
                             f"published; not measured by this project). Green: {machine}, field shapes, {cache} "
                             f"cache. Bars left to right: {order}. Each column has its own scale. The shapes differ, "
                             "so compare the pattern across implementations, not the heights.")


def _initials(impls) -> dict:
    """A short tick label per implementation: its label's first letter, or more letters where two share one."""
    labels = {i: impl_label(i) for i in impls}
    for n in (1, 2, 3, 4):
        short = {i: lab[:n] for i, lab in labels.items()}
        if len(set(short.values())) == len(short):
            return short
    return labels
