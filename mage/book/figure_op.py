"""One operation per implementation in the card's views (kernel time, event span, launches per call)
behind one toggle, with a log scale where one bar dwarfs the rest: each chapter's figure of its
operation (a figure of ``mage.book.figures``, which re-exports it)."""
from __future__ import annotations

import plotly.graph_objects as go

from mage import views as V
from .figure_style import (VIEW_LABEL, VIEW_UNIT, caption, impl_bars, impl_color, impl_label,
                           impls_in, log_toggle, not_measured, op_label, short_label, with_caption)

VIEWS = ("kernel_time", "event_span", "launches")
# One panel, one scale: the log button is offered from a smaller spread than on the opening figure's rows,
# since a bar a fifth of the tallest (the triangle's event spans) is already hard to read off the axis.
LOG_RATIO = 4.0


def view_menu(owner: list[str], views: list[str], title: str, y_axes: list[str], first: str) -> dict:
    """The card's toggle: one button per view, each showing that view's traces (``owner``: the view of
    each trace), with its unit on ``y_axes`` and its name in the title."""
    buttons = []
    for v in views:
        layout = {f"{a}.title.text": VIEW_UNIT[v] for a in y_axes}
        layout["title.text"] = f"{title}, {VIEW_LABEL[v]}"
        buttons.append(dict(label=VIEW_LABEL[v], method="update", args=[{"visible": [o == v for o in owner]}, layout]))
    return dict(type="buttons", direction="right", buttons=buttons, active=views.index(first), x=0, y=1.0,
                xanchor="left", yanchor="bottom", showactive=True)


def _ticks(shapes: list[str], keys=None) -> dict:
    """A shape's tick label: only the sizes that differ between the figure's shapes ('dist=skewed'), or
    only ``keys`` where given (one a line); the caption gives them whole (four lines of sizes per tick ran
    into the legend)."""
    if keys:
        return {s: "<br>".join(p for p in s.split(",") if p.split("=")[0] in keys) for s in shapes}
    parts = {s: s.split(",") for s in shapes}
    differ = [i for i in range(max(map(len, parts.values()))) if len({tuple(p[i:i + 1]) for p in parts.values()}) > 1]
    return {s: ", ".join(p[i] for i in differ if i < len(p)) or s for s, p in parts.items()}


def _grouped(fig, top, shapes, impls, view, visible, tick_keys=None):
    """A bar group per field shape, one bar per implementation (several shapes: no bar labels, which
    would overprint)."""
    tick = _ticks(shapes, tick_keys)
    for impl in impls:
        g = V.select(top, view=view, impl=impl).set_index("shape").reindex(shapes)
        if g["value"].isna().all():
            continue
        err = None
        if g["lo"].notna().any():
            err = dict(type="data", symmetric=False, array=(g["hi"] - g["value"]).clip(lower=0).fillna(0).tolist(),
                       arrayminus=(g["value"] - g["lo"]).clip(lower=0).fillna(0).tolist(), color="#333")
        fig.add_trace(go.Bar(
            x=[tick[s] for s in shapes], y=g["value"].tolist(), error_y=err, name=impl_label(impl),
            legendgroup=impl, visible=visible, marker_color=impl_color(impl),
            marker_line=dict(color="#333", width=0.6), meta={"series": VIEW_LABEL[view], "unit": VIEW_UNIT[view]},
            hovertemplate=f"{impl_label(impl)}<br>{VIEW_LABEL[view]} %{{y:,.3~r}} {VIEW_UNIT[view]}<br>shape %{{x}}"
                          "<extra></extra>"))


def op_views(df, op: str, machine: str, cache="warm", views=VIEWS, first: str = "kernel_time",
             shape_set: str = "field", dtype: str = "fp32", impls=None, tick_keys=None):
    """One operation at the shapes of ``shape_set`` (its field shapes unless told), one bar per
    implementation in its colour (named by the legend; ``impls``: these only), one view at a time:
    ``first`` is the view the figure opens on (the one the text beside it reads)."""
    d = V.select(df, op=op, shape_set=shape_set, cache=cache, dtype=dtype, stat="mean")
    if impls is not None:
        d = d[d["impl"].isin(impls)]
    have = set(d["shape"])
    shapes = [s for s in V.shapes_of(op, shape_set) if s in have] or sorted(have)
    top = V.headline(d, view=list(views)) if shapes else d
    views = [v for v in views if v in set(top["view"])]
    if not shapes or not views:
        return not_measured(f"{op_label(op)} per implementation", machine, f"{op_label(op)} at the {shape_set} shapes")
    first = first if first in views else views[0]
    impls = impls_in(top["impl"], op)
    precision = {"fp32": "FP32", "bf16": "bf16"}.get(dtype, dtype)
    # a figure of a set of its own or another precision says which (two such figures sit side by side)
    title = op_label(op) if (shape_set, dtype) == ("field", "fp32") else f"{op_label(op)}, {precision}"
    fig = go.Figure()
    owner = []
    for v in views:
        before = len(fig.data)
        if len(shapes) == 1:
            impl_bars(fig, V.select(top, view=v), impls, v, None, None, set(), visible=v == first)
        else:
            _grouped(fig, top, shapes, impls, v, v == first, tick_keys)
        owner += [v] * (len(fig.data) - before)
    one = len(shapes) == 1
    fig.update_layout(
        barmode="overlay" if one else "group", bargap=0.25, height=460, template="plotly_white",
        margin=dict(t=60, l=60, r=20, b=40), showlegend=not one,
        title=dict(text=f"{title}, {VIEW_LABEL[first]}", x=0, y=0.98, yanchor="top"),
        legend=dict(orientation="h", x=0, y=-0.12 if one else -0.2, yanchor="top", font=dict(size=11)),
        updatemenus=[view_menu(owner, views, title, ["yaxis"], first)])
    if one:
        fig.update_xaxes(categoryorder="array", categoryarray=impls, tickangle=0, tickvals=impls,
                         ticktext=[short_label(i) for i in impls])
    else:
        fig.update_xaxes(tickangle=0)
    fig.update_yaxes(title_text=VIEW_UNIT[first], rangemode="tozero")
    log_toggle(fig, V.select(top, view=[v for v in views if v != "launches"])["value"], ["yaxis"], ratio=LOG_RATIO)
    # On a phone the bars are named by a legend above the plot (tick labels would overprint).
    narrow = {"margin.l": 45, "margin.r": 8, "margin.b": 20, "showlegend": True, "legend.font.size": 10,
              "legend.y": -0.05 if one else -0.15}
    if one:
        narrow["xaxis.showticklabels"] = False
    else:
        narrow["xaxis.tickfont.size"] = 9  # a phone's width holds seven groups of short labels at this size
    fig.layout.meta = {"narrow": narrow, "narrow_height": 520, "narrow_font": 10, "per_impl": True,
                       "grid": {"by": ["view"] + ([] if one else ["x"]), "across": "name",
                                "heads": ["view"] + ([] if one else ["shape"])}}
    return with_caption(fig, caption(shape_set, cache, machine, {op: " and ".join(shapes)},
                                     f"{precision}. Whiskers on event spans: range of the round means."))
