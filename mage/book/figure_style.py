"""What every figure shares: names, colours and column order (from the facets and the registry, never
from tables keyed by name), captions, and the figure that says a card did not measure something.

Rows whose implementation is not registered here (a toolchain missing on this machine, another card's
data, the published figures) are drawn under their own name, in grey, after the registered ones.
"""
from __future__ import annotations

import functools
import math
import re
import textwrap

import plotly.graph_objects as go

from mage import facets
from mage.ops import OPS

GREY = "#888888"
VIEW_LABEL = {"kernel_time": "GPU kernel time", "event_span": "event span", "launches": "launches per call",
              "graph_span": "CUDA-graph replay span", "host_time": "host time per call"}
US = "µs"
VIEW_UNIT = {"kernel_time": US, "event_span": US, "launches": "launches", "graph_span": US, "host_time": US}
# Colours come from the registry (each implementation registers one, from Okabe and Ito's
# colour-blind-safe palette), so one implementation has one colour in every figure; an unregistered
# name is grey.
# A log axis is offered where the largest bar of a panel is this many times its smallest.
LOG_TOGGLE_RATIO = 20.0
PUBLISHED_LABEL = "RTX 4090 (published)"
NOT_MEASURED = "not measured on this card"


@functools.lru_cache(maxsize=1)
def _registered() -> dict:
    """name -> the first registered Impl of that name, in column order."""
    from mage import registry
    found = {}
    for i in registry.impls():
        found.setdefault(i.name, i)
    ordered = sorted(found.values(), key=lambda i: (facets.column_declared(i.name, "order", 50), i.name))
    return {i.name: i for i in ordered}


def impl_info(name: str):
    return _registered().get(name)


def impl_label(name: str) -> str:
    i = impl_info(name)
    return (facets.column_declared(i.name, "label", "") or i.name) if i is not None else str(name)


@functools.lru_cache(maxsize=1)
def _palette() -> dict:
    return {name: facets.column_declared(name, "color", "") or GREY for name in _registered()}


def impl_color(name: str) -> str:
    return _palette().get(name, GREY)


def short_label(name: str, width: int = 12) -> str:
    """An implementation's label broken into lines of about ``width`` characters (horizontal tick labels)."""
    return "<br>".join(textwrap.wrap(impl_label(name), width, break_long_words=False)) or str(name)


def impl_bars(fig, b, impls: list, view: str, row: int, col: int, seen: set, visible=True, text=True):
    """One bar trace per implementation (its colour, one legend entry per name in ``seen``), so a phone
    can name the bars by a legend instead of tick labels. ``b``: rows with impl, value, lo, hi, shape."""
    b = b.set_index("impl")
    unit = VIEW_UNIT.get(view, "")
    for impl in impls:
        if impl not in b.index or not math.isfinite(float(b.loc[impl, "value"])):
            continue
        r = b.loc[impl]
        err = None
        if "lo" in r and math.isfinite(float(r.get("lo", math.nan))):
            err = dict(type="data", symmetric=False, array=[max(float(r["hi"]) - float(r["value"]), 0)],
                       arrayminus=[max(float(r["value"]) - float(r["lo"]), 0)], thickness=1.2, width=4, color="#333")
        fig.add_trace(go.Bar(
            x=[impl], y=[float(r["value"])], error_y=err, name=impl_label(impl), legendgroup=impl,
            showlegend=impl not in seen, visible=visible, marker_color=impl_color(impl),
            marker_line=dict(color="#333", width=0.6), text=[fmt(float(r["value"]), unit)] if text else None,
            textposition="outside" if text else "none", cliponaxis=False,
            meta={"series": VIEW_LABEL.get(view, view), "unit": unit},
            customdata=[[str(r.get("shape", "")), kernel_list(r.get("kernel_names", "")), impl_label(impl)]],
            hovertemplate=f"<b>%{{customdata[2]}}</b><br>{VIEW_LABEL.get(view, view)}: %{{y:,.3~r}} {unit}"
                          "<br>shape %{customdata[0]}<br>kernels:<br>%{customdata[1]}<extra></extra>"),
            row=row, col=col)
        seen.add(impl)


def log_toggle(fig, values, y_axes, x: float = 1.0, ratio: float = LOG_TOGGLE_RATIO):
    """Add a linear / log scale menu for ``y_axes`` (layout keys) when one value is ``ratio`` times another."""
    v = [float(x) for x in values if x is not None and float(x) > 0]
    if len(v) < 2 or max(v) / min(v) < ratio:
        return fig
    menus = list(fig.layout.updatemenus or [])
    menus.append(dict(type="buttons", direction="right", active=0, x=x, y=1.0, xanchor="right", yanchor="bottom",
                      showactive=True, buttons=[
                          dict(label="linear scale", method="relayout", args=[{f"{a}.type": "linear" for a in y_axes}]),
                          dict(label="log scale", method="relayout", args=[{f"{a}.type": "log" for a in y_axes}])]))
    fig.update_layout(updatemenus=menus)
    return fig


def impls_in(values, op: str | None = None) -> list[str]:
    """The implementations among ``values`` in column order (the op's own order when given), the
    unregistered ones after them, sorted."""
    have = list(dict.fromkeys(values))
    if op is not None:
        from mage import registry
        order = list(dict.fromkeys(i.name for i in registry.impls(op)))
    else:
        order = []
    order += [n for n in _registered() if n not in order]
    return [n for n in order if n in have] + sorted(n for n in have if n not in order)


def op_label(op: str) -> str:
    return (facets.get(op, "label", "") or op) if op in OPS else str(op)


def op_short(op: str) -> str:
    if op not in OPS:
        return str(op)
    return facets.get(op, "short", "") or facets.get(op, "label", "") or op


def fmt(v: float, unit: str) -> str:
    """A bar's label: three significant digits, whole microseconds from 100 up."""
    if v is None or not math.isfinite(float(v)):
        return ""
    return plain(v) if unit == "launches" or v < 100 else f"{v:,.0f}"


SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def plain(v: float, digits: int = 3) -> str:
    """A number as a reader writes it: ``digits`` significant digits in plain notation with thousands
    separators (1,520, not 1.52e+03); below a thousandth, as a power of ten (1.2×10⁻⁷)."""
    if v is None or not math.isfinite(float(v)):
        return ""
    v = float(v)
    if v == 0:
        return "0"
    exp = math.floor(math.log10(abs(v)))
    if abs(v) < 1e-3:
        m = round(v / 10 ** exp, digits - 1)
        if abs(m) >= 10:  # 9.999e-5 rounds to 1.00e-4
            m, exp = m / 10, exp + 1
        return f"{m:.{digits - 1}f}".rstrip("0").rstrip(".") + "×10" + str(exp).translate(SUPERSCRIPT)
    r = round(v, digits - 1 - exp)
    decimals = max(digits - 1 - math.floor(math.log10(abs(r))), 0)  # 99.96 rounds up to 100: 0 decimals
    text = f"{r:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text  # as %g writes it: 0.5, not 0.500


def kernel_list(s: str, n: int = 3) -> str:
    """The first ``n`` recorded kernel names, shortened, one a line (hover text)."""
    parts = [p for p in str(s).split("|") if p]
    if not parts:
        return "(none recorded)"
    short = [p if len(p) <= 60 else p[:57] + "..." for p in parts[:n]]
    return "<br>".join(short) + (f"<br>... and {len(parts) - n} more" if len(parts) > n else "")


def caption(shape_set: str, cache: str, machine: str, shapes: dict | None = None, extra: str = "") -> str:
    shape_txt = ("; shapes " + ", ".join(f"{op_label(o)} {s}" for o, s in shapes.items())) if shapes else ""
    return f"{machine}, {shape_set} shapes, {cache} cache{shape_txt}.{(' ' + extra) if extra else ''}"


def with_caption(fig, text: str):
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    meta["caption"] = text
    fig.layout.meta = meta
    return fig


def with_grid(fig, by: list[str], across: str, heads: list[str] | None = None):
    """The figure's values table as a grid (``mage.book.figure_page.grid_table``): a row per combination of
    ``by`` (panel, view, series, name or x), a column per value of ``across``; ``heads`` name the row keys."""
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    if not meta.get("not_measured"):
        meta["grid"] = {"by": list(by), "across": across, "heads": list(heads or by)}
        fig.layout.meta = meta
    return fig


def not_measured(title: str, machine: str, what: str):
    """A figure that says what this card's data lacks, in place of one it cannot draw."""
    fig = go.Figure()
    fig.add_annotation(text=f"{what}: {NOT_MEASURED}", x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font=dict(size=15, color="#555"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=200, template="plotly_white", title=dict(text=title, x=0))
    fig = with_caption(fig, f"{machine}: {what} {NOT_MEASURED}.")
    fig.layout.meta = {**fig.layout.meta, "not_measured": True}  # a page says so in words, not as an empty plot
    return fig


def use_notebook_renderer() -> None:
    """Pages show figures with plotly's "notebook" renderer (plotly.js inline: works offline), minus the
    MathJax it always fetches from a CDN (the book serves its own, and no figure here uses LaTeX)."""
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
