"""A whole model's forward pass (``mage.ext.models``' rows, ``<data>/models/rows.csv``): stock and with the
project's kernels swapped in, eager and under torch.compile, in the card's views behind one toggle."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .figure_op import view_menu
from .figure_style import VIEW_LABEL, VIEW_UNIT, with_caption

# (a bar's name, two short lines so four fit side by side on a phone)
COLUMNS = {"stock": ("stock<br>eager", "#8C8C8C"), "stock_compile": ("stock<br>compiled", "#4C72B0"),
           "swapped": ("ours<br>eager", "#DD8452"), "swapped_compile": ("ours<br>compiled", "#C44E52"),
           "accelerated": ("package's<br>fast road", "#55A868")}  # MACE's own cuEquivariance road, where run
VIEWS = ("kernel_time", "event_span", "launches")


COLUMNS_OF_ROWS = ["op", "dtype", "shape", "impl", "view", "stat", "round", "stage", "value", "run"]


def load(path) -> pd.DataFrame:
    """The rows of each model case's (model, shape, precision) newest complete run; empty when the folder
    has none. A run ends with Amdahl's prediction: one cut by a time limit keeps the columns it finished in
    the data, but a page never shows them, nor mixes them with another run's columns; nor a run one of
    whose columns failed its check (``checks.csv``)."""
    f = path / "models" / "rows.csv"
    if not f.is_file():
        return pd.DataFrame(columns=COLUMNS_OF_ROWS)
    rows = pd.read_csv(f)
    case = ["op", "shape", "dtype"]
    ended = rows[rows["stat"] == "predicted"]
    # a run whose columns ran to its end but one of ours (or the stock model) failed its check is not
    # complete either: it would show a figure without that column (the package's fast road may be absent)
    checks = path / "models" / "checks.csv"
    if checks.is_file():
        c = pd.read_csv(checks)
        bad = c[(c["passed"].astype(str) != "True") & (c["impl"] != "accelerated")][case + ["run"]].drop_duplicates()
        ended = ended.merge(bad.assign(failed=True), on=case + ["run"], how="left")
        ended = ended[ended["failed"].isna()]
    done = ended.groupby(case)["run"].max().rename("done").reset_index()
    rows = rows.merge(done, on=case, how="left")
    return rows[rows["run"] == rows["done"]].drop(columns="done").reset_index(drop=True)


def value(rows: pd.DataFrame, op: str, impl: str, view: str = "kernel_time", stat: str = "mean", stage=None,
          dtype: str = "fp32", shape=None) -> float:
    """One column's value at one precision (and ``shape``, where a run measured several) from the newest run
    that measured the model (NaN when absent)."""
    d = rows[(rows["op"] == op) & (rows["impl"] == impl) & (rows["view"] == view) & (rows["stat"] == stat)
             & (rows["round"] == 0) & (rows["dtype"] == dtype)]
    d = d[d["shape"] == shape] if shape is not None else d
    d = d[d["stage"] == stage] if stage is not None else d[d["stage"].isna()] if "stage" in d else d
    return float(d.sort_values("run")["value"].iloc[-1]) if len(d) else float("nan")


def count(shape: str, unit: str | None = None) -> int:
    """A count the shape names ("atoms=3000,edges=...,cutoff=6.0": atoms, edges; frames, tokens), the first
    one where ``unit`` is not given."""
    named = dict(kv.split("=") for kv in shape.split(","))
    return int(named[unit] if unit else next(iter(named.values())))


def per_second(rows: pd.DataFrame, op: str, impl: str, unit: str, dtype: str = "fp32", shape=None) -> float:
    """How many ``unit`` (a count the shape names: tokens, atoms) one column processes a second of kernel
    time, at ``shape`` (the newest shape of the case where not given)."""
    shape = shape or rows.loc[(rows["op"] == op) & (rows["dtype"] == dtype), "shape"].iloc[-1]
    return count(shape, unit) / (value(rows, op, impl, dtype=dtype, shape=shape) * 1e-6)


def largest(rows: pd.DataFrame, op: str) -> str | None:
    """The shape of ``op`` with the most atoms (or tokens) that the rows hold: its first number."""
    shapes = set(rows.loc[rows["op"] == op, "shape"])
    return max(shapes, key=count, default=None)


def forward(rows: pd.DataFrame, op: str, label: str, machine: str, first: str = "kernel_time", dtype: str = "fp32",
            note: str = "", shape=None):
    """One bar per column in each view at one precision, the toggle between views; ``note`` ends the caption."""
    fig, owner = go.Figure(), []
    for v in VIEWS:
        for impl, (name, color) in COLUMNS.items():
            y = value(rows, op, impl, v, dtype=dtype, shape=shape)
            if y == y:  # measured
                fig.add_trace(go.Bar(x=[name], y=[y], name=name, marker_color=color, visible=v == first,
                                     showlegend=False, meta={"series": VIEW_LABEL[v], "unit": VIEW_UNIT[v]},
                                     hovertemplate=f"{name.replace('<br>', ', ')}<br>{VIEW_LABEL[v]} %{{y:,.4~r}} {VIEW_UNIT[v]}<extra></extra>"))
                owner.append(v)
    fig.update_layout(height=420, template="plotly_white", margin=dict(t=60, l=60, r=20, b=40), bargap=0.35,
                      title=dict(text=f"{label}, {VIEW_LABEL[first]}", x=0, y=0.98, yanchor="top"),
                      updatemenus=[view_menu(owner, list(VIEWS), label, ["yaxis"], first)])
    fig.update_yaxes(title_text=VIEW_UNIT[first], rangemode="tozero")
    fig.update_xaxes(tickangle=0)
    fig.layout.meta = {"narrow": {"margin.l": 45, "margin.r": 8, "xaxis.tickfont.size": 9}, "narrow_height": 460,
                       "narrow_font": 10, "per_impl": True,
                       "grid": {"by": ["view"], "across": "name", "heads": ["view"]}}
    shape = [shape] if shape else list(rows.loc[(rows["op"] == op) & (rows["dtype"] == dtype), "shape"])
    what = "one forward pass and its gradient" if op in ("schnet", "mace") else "one forward pass"
    return with_caption(fig, f"{machine}, {what}{' (' + shape[-1] + ')' if len(shape) else ''}; "
                             f"{'FP32' if dtype == 'fp32' else dtype}, warm.{' ' + note if note else ''}")


def rows_for(op: str, path, machine: str) -> tuple[pd.DataFrame, str]:
    """The model rows of ``op`` and the machine that measured them: the folder (the book's own, ``path``,
    or a machine's beside it) whose stalest case of the model (its oldest newest complete run over the
    cases: precision and shape; run ids begin with their UTC time) is newest. Every case is then read
    from that folder, named by the caller's sentence and figure, never mixed with another's. The swaps
    change as kernels are added, so an older run describes code that is gone: a folder where one
    precision was re-run on today's code but the other was not loses to one where both were. Empty rows
    when no folder holds the model."""
    from mage import book
    found = []
    for folder in [path] + sorted(p for p in path.parent.iterdir() if p.is_dir() and p != path):
        r = load(folder)
        if (r["op"] == op).any():
            stalest = r.loc[r["op"] == op].groupby(["shape", "dtype"])["run"].max().min()
            found.append((str(stalest), folder == path, folder.name, r))
    if not found:
        return load(path), machine
    _, own, name, r = max(found, key=lambda f: f[:2])
    return r, machine if own else book.other_machine(name).machine
