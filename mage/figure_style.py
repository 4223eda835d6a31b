"""What every figure shares: names, colours and column order (from the specs and the registry, never
from tables keyed by name), captions, and the figure that says a card did not measure something.

Rows whose implementation is not registered here (a toolchain missing on this machine, another card's
data, the published figures) are drawn under their own name, in grey, after the registered ones.
"""
from __future__ import annotations

import functools
import re

import plotly.graph_objects as go

from .ops import OPS

GREY = "#888888"
VIEW_LABEL = {"kernel_time": "GPU kernel time", "event_span": "event span", "launches": "launches per call",
              "graph_span": "CUDA-graph replay span", "host_time": "host time per call"}
VIEW_UNIT = {"kernel_time": "us", "event_span": "us", "launches": "launches", "graph_span": "us", "host_time": "us"}
PUBLISHED_LABEL = "RTX 4090 (published)"
NOT_MEASURED = "not measured on this card"


@functools.lru_cache(maxsize=1)
def _registered() -> dict:
    """name -> the first registered Impl of that name, in column order (family, then order)."""
    from . import registry
    from .registry import FAMILIES
    found = {}
    for i in registry.impls():
        found.setdefault(i.name, i)
    fam = {f: n for n, f in enumerate(FAMILIES)}
    ordered = sorted(found.values(), key=lambda i: (fam.get(i.family, len(fam)), i.order, i.name))
    return {i.name: i for i in ordered}


def forget_registry() -> None:
    """Drop the cached names (after a test registers another implementation)."""
    _registered.cache_clear()


def impl_info(name: str):
    return _registered().get(name)


def impl_label(name: str) -> str:
    i = impl_info(name)
    return (i.label or i.name) if i is not None else str(name)


def impl_color(name: str) -> str:
    i = impl_info(name)
    return i.color if i is not None and i.color else GREY


def impls_in(values, op: str | None = None) -> list[str]:
    """The implementations among ``values`` in column order (the op's own order when given), the
    unregistered ones after them, sorted."""
    have = list(dict.fromkeys(values))
    if op is not None:
        from . import registry
        order = list(dict.fromkeys(i.name for i in registry.impls(op)))
    else:
        order = []
    order += [n for n in _registered() if n not in order]
    return [n for n in order if n in have] + sorted(n for n in have if n not in order)


def op_label(op: str) -> str:
    spec = OPS.get(op)
    return (spec.label or op) if spec else str(op)


def op_short(op: str) -> str:
    spec = OPS.get(op)
    return (spec.short or spec.label or op) if spec else str(op)


def fmt(v: float, unit: str) -> str:
    """A bar's label: three significant digits, whole microseconds from 100 up."""
    if unit == "launches":
        return f"{v:.3g}"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


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
    fig.layout.meta = {"caption": text}
    return fig


def not_measured(title: str, machine: str, what: str):
    """A figure that says what this card's data lacks, in place of one it cannot draw."""
    fig = go.Figure()
    fig.add_annotation(text=f"{what}: {NOT_MEASURED}", x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font=dict(size=15, color="#555"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=200, template="plotly_white", title=dict(text=title, x=0))
    return with_caption(fig, f"{machine}: {what} {NOT_MEASURED}.")


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
