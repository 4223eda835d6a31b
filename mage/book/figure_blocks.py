"""The model blocks' figures: the Amdahl table drawn (predicted against measured block speedups, and
where the baseline's time goes), throughput against batch, and latency as a service sees it (closed-loop
percentiles, the open loop's tail against offered load, and the share of each part of a request).

Every figure takes tidy rows (``mage.ext.amdahl.attribution.table`` or the service rows of ``mage.load``) and offers one
button per case (block and precision, and host memory where it matters), so a reader toggles between
them; a figure whose rows the card did not record says so instead. Names and colours come from the
specs and the registry.
"""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from mage import facets
from mage import views as V
from mage.ops import OPS

from .figure_style import impl_color, impl_label, impls_in, not_measured, op_label, with_caption, with_grid

PERCENTILES = {"p50": "p50", "p90": "p90", "p99": "p99", "p999": "p99.9", "max": "max"}
PART_COLORS = {"h2d": "#4c78a8", "compute": "#f58518", "d2h": "#54a24b", "other": "#b8b8b8", "queue": "#e45756"}
NARROW = {"margin.l": 45, "margin.r": 8, "legend.font.size": 10}


def _blocks(values) -> list[str]:
    return V.ops_in(values, kind="block")


def _buttoned(title: str, groups: list[tuple[str, list]], height: int = 460, y_title: str = "", x_title: str = "",
              log_x: bool = False, barmode: str = "group", active: int = 0):
    """One figure holding every group's traces, one button a group, group ``active`` shown first."""
    fig = go.Figure()
    owner = []
    for g, (label, traces) in enumerate(groups):
        for t in traces:
            t.visible = g == active
            fig.add_trace(t)
            owner.append(label)
    buttons = [dict(label=label, method="update", args=[{"visible": [o == label for o in owner]},
                                                       {"title.text": f"{title}: {label}"}])
               for label, _ in groups]
    fig.update_layout(
        height=height, template="plotly_white", barmode=barmode, title=dict(text=f"{title}: {groups[active][0]}", x=0),
        margin=dict(t=120, l=60, r=20, b=50), legend=dict(orientation="h", x=0, y=-0.18, yanchor="top"),
        updatemenus=[dict(type="buttons", direction="right", buttons=buttons, active=active, x=0, y=1.02,
                          xanchor="left", yanchor="bottom", showactive=True)] if len(groups) > 1 else [])
    fig.update_xaxes(title=x_title, type="log" if log_x else None)
    fig.update_yaxes(title=y_title, rangemode="tozero")
    fig.layout.meta = {"narrow": dict(NARROW), "narrow_height": height + 80}
    return fig


def short_ticks(fig, axis: str = "xaxis"):
    """On a phone, category ticks 'block name<br>shape' become the block's short name: the two-line
    labels of neighbouring bars ran into one another and into the legend."""
    ticks = list(dict.fromkeys(x for t in fig.data for x in (t.x if t.x is not None else ()) if isinstance(x, str)))
    short = {facets.of(o).label: (facets.of(o).get("short", "") or facets.of(o).label) for o in OPS}
    text = [short.get(x.split("<br>")[0], x.split("<br>")[0]) for x in ticks]
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    meta["narrow"] = {**meta.get("narrow", {}), f"{axis}.tickmode": "array", f"{axis}.tickvals": ticks,
                      f"{axis}.ticktext": text}
    fig.layout.meta = meta
    return fig


# ------------------------------------------------------------------------------------------- Amdahl
def amdahl_bars(t: pd.DataFrame, machine: str):
    """Per block, the custom column's speedup over the baseline as Amdahl's law predicts it from the
    operations' own speedups, beside the measured one; one button per precision."""
    if t is None or t.empty:
        return not_measured("Amdahl's law inside the blocks", machine, "the blocks' attribution (python -m mage amdahl)")
    groups = []
    for dtype in [d for d in ("fp32", "bf16") if d in set(t["dtype"])] + sorted(set(t["dtype"]) - {"fp32", "bf16"}):
        d = t[t["dtype"] == dtype]
        d = d.set_index("block").loc[_blocks(d["block"])].reset_index()
        x = [f"{op_label(b)}<br>{s}" for b, s in zip(d["block"], d["shape"])]
        traces = [go.Bar(x=x, y=d["predicted"], name="predicted from the operations", marker_color="#9ecae1",
                         text=[_x(v) for v in d["predicted"]], textposition="outside"),
                  go.Bar(x=x, y=d["measured"], name="measured (block kernel time)", marker_color="#08519c",
                         text=[_x(v) for v in d["measured"]], textposition="outside")]
        groups.append((dtype, traces))
    fig = _buttoned("Block speedup of the custom column over eager", groups, y_title="speedup (x)")
    fig.add_hline(y=1.0, line=dict(color="#777", dash="dot"))
    short_ticks(fig)
    with_grid(fig, ["view", "x"], "name", ["precision", "block"])
    return with_caption(fig, f"{machine}, kernel time, warm inputs. Predicted: 1 / ((1 - sum p_i) + sum p_i / s_i), "
                             "p_i from the eager block's profile, s_i from each operation alone at the block's shapes; "
                             "a missing bar was not measured.")


def amdahl_shares(t: pd.DataFrame, machine: str):
    """Where the eager block's kernel time goes, operation by operation (p_i), one bar per block;
    one button per precision."""
    if t is None or t.empty:
        return not_measured("Where a block's time goes", machine, "the blocks' attribution (python -m mage amdahl)")
    groups = []
    for dtype in sorted(set(t["dtype"]), key=lambda d: (d != "fp32", d)):
        d = t[t["dtype"] == dtype]
        d = d.set_index("block").loc[_blocks(d["block"])].reset_index()
        parts = list(dict.fromkeys(p for ps in d["parts"] for p in ps))
        y = [op_label(b) for b in d["block"]]
        traces = []
        for part in parts + ["other"]:
            share = [ps.get(part, {}).get("p", math.nan) if part != "other" else
                     max(0.0, 1 - sum(v["p"] for v in ps.values() if v["p"] == v["p"])) for ps in d["parts"]]
            speed = [ps.get(part, {}).get("s", math.nan) for ps in d["parts"]]
            traces.append(go.Bar(y=y, x=share, orientation="h", name=op_label(part) if part in OPS else part,
                                 customdata=[_x(s) for s in speed],
                                 hovertemplate="%{x:.1%} of the eager block; operation alone: %{customdata}<extra></extra>"))
        groups.append((dtype, traces))
    fig = _buttoned("Share of the eager block's kernel time", groups, height=380, x_title="share of kernel time",
                    barmode="stack")
    fig.update_xaxes(tickformat=".0%", range=[0, 1])
    fig.update_layout(legend_y=-0.3)  # below the axis title, which it overprinted
    fig.layout.meta["narrow"]["legend.y"] = -0.35
    with_grid(fig, ["view", "x"], "name", ["precision", "block"])
    return with_caption(fig, f"{machine}, kernel time of eager PyTorch, warm inputs; kernels assigned to operations by "
                             "name (each block's spec lists the patterns).")


def _x(v) -> str:
    return f"{v:.2f}x" if v == v and v is not None else "not measured"


# ------------------------------------------------------------------------------------------ service
def _service(df: pd.DataFrame, **where) -> pd.DataFrame:
    if df is None or df.empty or "loop" not in df.columns:
        return pd.DataFrame(columns=list(df.columns) if df is not None else [])
    return V.select(df, shape_set="service", **where)


def _cases(d: pd.DataFrame, by=("op", "dtype")):
    """(label, rows) per case, blocks in the specs' order."""
    out = []
    for block in _blocks(d["op"]):
        for key, rows in d[d["op"] == block].groupby(list(by[1:]), sort=True):
            key = key if isinstance(key, tuple) else (key,)
            out.append((", ".join([op_label(block), *map(str, key)]), rows))
    return out


# The case a service figure opens on: the one the chapter's text discusses (FP32, inputs in pinned memory).
TEXT_CASE = {"dtype": "fp32", "host_mem": "pinned"}


def _opening(cases: list, case: dict | None) -> int:
    """The index of the first case whose rows all match ``case`` (0 when none does)."""
    for i, (_, rows) in enumerate(cases):
        if all(k in rows and set(rows[k].astype(str)) == {str(v)} for k, v in (case or {}).items()):
            return i
    return 0


def throughput(df: pd.DataFrame, machine: str, case: dict | None = None):
    """Items per second end to end against the batch size (requests per batch), one line per
    implementation; one button per block, precision and host memory."""
    d = _service(df, view="throughput", stat="mean")
    d = d[d["loop"] == "batch_sweep"] if len(d) else d
    if d.empty:
        return not_measured("Throughput against batch", machine, "the batch sweep (python -m mage serve)")
    groups, cases = [], _cases(d, ("op", "dtype", "host_mem"))
    active = _opening(cases, TEXT_CASE if case is None else case)
    for label, rows in cases:
        traces = []
        for impl in impls_in(rows["impl"]):
            r = rows[rows["impl"] == impl].sort_values("batch")
            traces.append(go.Scatter(x=r["batch"], y=r["value"], mode="lines+markers", name=impl_label(impl),
                                     line=dict(color=impl_color(impl))))
        groups.append((label, traces))
    fig = _buttoned("Throughput against batch", groups, y_title="items per second", x_title="requests per batch",
                    log_x=True, active=active)
    with_grid(fig, ["view", "x"], "name", ["case", "requests per batch"])
    return with_caption(fig, f"{machine}, service shapes: a request's inputs from host memory to its output back "
                             "there, batches of B requests back to back.")


def latency(df: pd.DataFrame, machine: str, loop: str = "closed", case: dict | None = None):
    """Closed-loop latency percentiles (p50 to max) per implementation; one button per block,
    precision and host memory."""
    d = _service(df, view="latency")
    d = d[(d["loop"] == loop) & d["stat"].isin(list(PERCENTILES))] if len(d) else d
    if d.empty:
        return not_measured("Latency percentiles", machine, f"the {loop}-loop service run (python -m mage serve)")
    groups, cases = [], _cases(d, ("op", "dtype", "host_mem"))
    active = _opening(cases, TEXT_CASE if case is None else case)
    for label, rows in cases:
        traces = []
        for impl in impls_in(rows["impl"]):
            r = rows[rows["impl"] == impl].set_index("stat").reindex(list(PERCENTILES))
            traces.append(go.Scatter(x=list(PERCENTILES.values()), y=r["value"], mode="lines+markers",
                                     name=impl_label(impl), line=dict(color=impl_color(impl))))
        groups.append((label, traces))
    fig = _buttoned(f"{loop.capitalize()}-loop latency", groups, y_title="latency (µs)", x_title="percentile",
                    active=active)
    with_grid(fig, ["view", "x"], "name", ["case", "percentile"])
    fig.update_yaxes(type="log", rangemode=None, dtick="D2")  # (labels at 1, 2, 5: the 9 ran into the 1000)
    return with_caption(fig, f"{machine}, one request at a time, from its inputs in host memory to its output back "
                             "there; nearest-rank percentiles (each one a latency a request really had).")


def open_loop(df: pd.DataFrame, machine: str, stat: str = "p99", case: dict | None = None):
    """The open loop's tail (p99 by default) against offered load, one line per implementation; one
    button per block, precision and host memory."""
    d = _service(df, view="latency", stat=stat)
    d = d[d["loop"] == "open"] if len(d) else d
    if d.empty:
        return not_measured("Tail latency against load", machine, "the open-loop service run (python -m mage serve)")
    groups, cases = [], _cases(d, ("op", "dtype", "host_mem"))
    active = _opening(cases, TEXT_CASE if case is None else case)
    for label, rows in cases:
        traces = []
        for impl in impls_in(rows["impl"]):
            r = rows[rows["impl"] == impl].sort_values("load")
            traces.append(go.Scatter(x=r["load"], y=r["value"], mode="lines+markers", name=impl_label(impl),
                                     line=dict(color=impl_color(impl))))
        groups.append((label, traces))
    fig = _buttoned(f"Open-loop {PERCENTILES.get(stat, stat)} latency against load", groups,
                    y_title="latency (µs)", x_title="offered load (share of the measured peak)", active=active)
    with_grid(fig, ["view", "x"], "name", ["case", "offered load (share of the peak)"])
    fig.update_xaxes(tickformat=".0%")
    fig.update_yaxes(type="log", rangemode=None, dtick="D2")  # (labels at 1, 2, 5: the 9 ran into the 1000)
    return with_caption(fig, f"{machine}: Poisson arrivals, a dynamic batcher (up to B requests or D µs after the "
                             "first); latency includes the time a request waits in the queue.")


def latency_parts(df: pd.DataFrame, machine: str, loop: str = "closed", case: dict | None = None):
    """Where a request's time goes: the mean share of each part (copy in, compute, copy out, other,
    and the queue in the open loop) per implementation; one button per block, precision and host memory."""
    d = _service(df, view="latency_share")
    d = d[d["loop"] == loop] if len(d) else d
    if d.empty:
        return not_measured("Where a request's time goes", machine, f"the {loop}-loop service run")
    if loop == "open":  # the heaviest load the run offered: where the queue matters most
        d = d[d["load"] == d["load"].max()]
    groups, cases = [], _cases(d, ("op", "dtype", "host_mem"))
    active = _opening(cases, TEXT_CASE if case is None else case)
    for label, rows in cases:
        impls = impls_in(rows["impl"])
        traces = []
        for stage in [s for s in PART_COLORS if s in set(rows["stage"])]:
            r = rows[rows["stage"] == stage].set_index("impl").reindex(impls)
            traces.append(go.Bar(y=[impl_label(i) for i in impls], x=r["value"], orientation="h", name=stage,
                                 marker_color=PART_COLORS[stage]))
        groups.append((label, traces))
    fig = _buttoned(f"Where a request's time goes ({loop} loop)", groups, height=400, barmode="stack",
                    x_title="share of the mean latency", active=active)
    with_grid(fig, ["view", "x"], "name", ["case", "implementation"])
    fig.update_xaxes(tickformat=".0%")
    return with_caption(fig, f"{machine}: the mean of each part over the mean latency; h2d and d2h are the copies "
                             "to and from the device.")
