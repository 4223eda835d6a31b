"""A figure as a page shows it: the plotly JSON for the book's shared loader (notes/js/mage-book.js draws
it with the one plotly.js the site serves, so no page carries its own copy), the caption, and a
collapsed table of the plotted values. The same output carries plotly's own mime type, so a figure
also draws in a running Jupyter (which has plotly's renderer and not the book's loader).
"""
from __future__ import annotations

import html
import json

from .figure_style import plain

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) or hasattr(v, "__float__") and not isinstance(v, (str, bool)):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return html.escape(str(v))
        return plain(f)  # plain notation (1,520, not 1.52e+03); '' for a value not measured
    return html.escape(str(v).replace("<br>", " "))


def _axis_key(ref: str, letter: str) -> str:
    n = (ref or letter)[1:]
    return f"{letter}axis{n}"


def _panels(fig) -> dict:
    """Subplot titles by (xaxis, yaxis) layout keys: a title annotation sits just above its subplot."""
    lay = fig.layout
    found = {}
    anns = [a for a in (lay.annotations or []) if a.text and a.xref == "paper" and a.yref == "paper"
            and not a.textangle and a.x is not None and a.y is not None]
    for t in fig.data:
        xk, yk = _axis_key(getattr(t, "xaxis", None), "x"), _axis_key(getattr(t, "yaxis", None), "y")
        if (xk, yk) in found:
            continue
        xd, yd = lay[xk].domain or (0, 1), lay[yk].domain or (0, 1)
        best = [a for a in anns if xd[0] - 1e-6 <= a.x <= xd[1] + 1e-6 and yd[1] - 1e-6 <= a.y <= yd[1] + 0.08]
        found[(xk, yk)] = min(best, key=lambda a: a.y).text if best else ""
    return found


def _views(fig) -> list[list[str]]:
    """For each trace, the labels of the buttons that show it (empty when no menu hides traces)."""
    out = [[] for _ in fig.data]
    for menu in fig.layout.updatemenus or []:
        for b in menu.buttons or []:
            args = b.args or []
            vis = args[0].get("visible") if args and isinstance(args[0], dict) else None
            if isinstance(vis, (list, tuple)) and len(vis) == len(fig.data):
                for i, shown in enumerate(vis):
                    if shown is True:
                        out[i].append(b.label)
    return out


def _unit(fig, key: str) -> str:
    t = fig.layout[key].title.text if fig.layout[key] and fig.layout[key].title else None
    return t or ""


def _rows(fig) -> list[dict]:
    """Every plotted value with what names it: panel, view (the buttons that show it), series, trace name,
    category (or x), value and unit. Traces marked ``meta={"table": False}`` (formula curves, roofs) are
    left out; so are hidden helper traces without values."""
    panels, views = _panels(fig), _views(fig)
    rows = []
    for i, t in enumerate(fig.data):
        meta = t.meta if isinstance(t.meta, dict) else {}
        if meta.get("table") is False or getattr(t, "x", None) is None or getattr(t, "y", None) is None:
            continue
        xs, ys = list(t.x), list(t.y)
        horizontal = getattr(t, "orientation", None) == "h"
        if horizontal:
            xs, ys = ys, xs
        xk, yk = _axis_key(getattr(t, "xaxis", None), "x"), _axis_key(getattr(t, "yaxis", None), "y")
        unit = meta.get("unit") or _unit(fig, xk if horizontal else yk)
        step = int(meta.get("table_step", 1))
        for x, y in list(zip(xs, ys))[::step]:
            rows.append(dict(panel=meta.get("panel") or panels.get((xk, yk), ""), view=" / ".join(views[i]),
                             series=meta.get("series", t.name or ""), name=t.name or "", x=x, value=y, unit=unit))
    return rows


def _wrap(head: str, body: list[str], more: str = "", unit: str = "") -> str:
    title = f"The plotted values ({html.escape(unit)})" if unit else "The plotted values"
    return (f"<details class=\"mage-values\"><summary>{title}</summary>"
            f"<div class=\"mage-table-scroll\"><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}"
            f"</tbody></table></div>{more}</details>")


def grid_table(rows: list[dict], by: list[str], across: str, heads: list[str] | None = None) -> str:
    """The values as a grid, the way the original note printed its table: one row per combination of
    the ``by`` fields (e.g. view and operation; the unit beside the view), one column per value of
    ``across`` (e.g. the implementation), a blank cell where a case was not measured."""
    heads = heads or by
    with_unit = "view" in heads  # the unit beside each view; otherwise one unit for the table, when it has one

    def cell(r, k):
        v = (r["view"] or r["series"]) if k == "view" else r[k]
        return f"{v} ({r['unit']})" if with_unit and k == "view" and r["unit"] and r["unit"] not in v else v

    def key(r):
        return tuple(cell(r, k) for k in by)
    units = {r["unit"] for r in rows}
    cols = list(dict.fromkeys(str(r[across]) for r in rows))
    cells = {}
    for r in rows:
        cells.setdefault(key(r), {})[str(r[across])] = r["value"]
    head = "".join(f"<th>{_fmt(h)}</th>" for h in heads) + "".join(f"<th>{_fmt(c)}</th>" for c in cols)
    body = ["<tr>" + "".join(f"<th>{_fmt(v)}</th>" for v in k)
            + "".join(f"<td>{_fmt(got.get(c))}</td>" for c in cols) + "</tr>" for k, got in cells.items()]
    return _wrap(head, body, unit="" if with_unit or len(units) != 1 else units.pop())


def values_table(fig, max_rows: int = 400) -> str:
    """An HTML table of every plotted value: panel, view, series, category (or x) and value; or, for a
    figure that is a grid of cases (``meta={"grid": {"by": [...], "across": ...}}``), that grid."""
    rows = _rows(fig)
    if not rows:
        return ""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    if meta.get("grid"):
        g = meta["grid"]
        return grid_table(rows, list(g["by"]), g["across"], g.get("heads"))
    cols = [n for n in ("panel", "view", "series") if any(r[n] for r in rows)]
    head = "".join(f"<th>{n}</th>" for n in cols) + "<th>x</th><th>value</th><th>unit</th>"
    body = []
    for r in rows[:max_rows]:
        cells = "".join(f"<td>{_fmt(r[k])}</td>" for k in cols)
        body.append(f"<tr>{cells}<td>{_fmt(r['x'])}</td><td>{_fmt(r['value'])}</td><td>{_fmt(r['unit'])}</td></tr>")
    more = f"<p>... and {len(rows) - max_rows} more values.</p>" if len(rows) > max_rows else ""
    return _wrap(head, body, more)


def to_html(fig) -> str:
    """The figure as the book's loader draws it, with its caption and values table."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    spec = fig.to_json().replace("</", "<\\/")  # the JSON sits inside a script element
    cap = meta.get("caption")
    cap_html = f"<p class=\"mage-caption\"><em>{html.escape(cap)}</em></p>" if cap else ""
    return (f"<div class=\"mage-figure\"><div class=\"mage-plot\"></div>"
            f"<script type=\"application/json\" class=\"mage-figure-json\">{spec}</script></div>"
            f"{cap_html}{values_table(fig)}")


def show(fig) -> None:
    """Display one figure: HTML for the book, plotly's mime type for a running Jupyter."""
    from IPython.display import display
    display({"text/html": to_html(fig), PLOTLY_MIME: json.loads(fig.to_json())}, raw=True)
