"""Where a small call's host time goes: the launch-path breakdown (rows of view 'host_stage' that
``python -m mage launch-path`` records) drawn as one stacked bar per precision of the custom column,
beside the library's whole call, and the sentence the book glues from the same table.

Which stages partition a call is read from the rows themselves, so this module needs no list of stage
names: ``mage.ext.launch_path.breakdown`` defines 'other (Python glue)' as the whole call less the top-level stages,
so the top-level stages are the set that adds up, with it, to the whole call. Nested stages (a
launcher's argument binding inside the custom column's launch), whole calls through another door (a
``torch.library`` operator) and differences of two timed stages are left out unless they belong to
such a set; where two sets add up (the launch, or its binding plus its driver call), the finer one
is drawn, so nothing is counted twice and the bar's length is the whole call.
"""
from __future__ import annotations

import itertools
import math

import pandas as pd
import plotly.graph_objects as go

from mage import views as V
from mage.ext.launch_path.breakdown import AFTER_SYNC, OTHER, VIEW, WHOLE

from .figure_style import GREY, impl_color, impl_label, not_measured, op_label, with_caption, with_grid

# The launch-path target: a custom call's host time at most this multiple of the library's
# one-launch call (a goal set before measuring, not a measurement).
TARGET = 1.2
# Stage colours in the order the stages first appear in the rows (colour-blind-safe, Okabe and Ito,
# then Tol's muted set); the unnamed remainder is always grey.
STAGE_COLORS = ["#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#D55E00", "#F0E442",
                "#332288", "#88CCEE", "#117733", "#999933", "#AA4499"]
_TOL = 1e-6  # microseconds: the derived remainder equals whole less the parts to rounding only


def parts_of(stages: dict) -> list:
    """The stages that partition the whole call (finest set first found, in ``stages``' order), then
    the remainder; ``[WHOLE]`` when the case has no breakdown (an implementation without a hook)."""
    if OTHER not in stages or WHOLE not in stages:
        return [WHOLE] if WHOLE in stages else []
    want = stages[WHOLE] - stages[OTHER]
    names = [s for s, v in stages.items() if s not in (WHOLE, AFTER_SYNC, OTHER) and math.isfinite(v)]
    tol = _TOL * max(1.0, abs(stages[WHOLE]))
    for n in range(len(names), 0, -1):  # the finest partition: most stages
        for combo in itertools.combinations(names, n):
            if abs(sum(stages[s] for s in combo) - want) <= tol:
                return list(combo) + [OTHER]
    return [OTHER]


def _roles(custom, baseline):
    """The registry's custom and baseline columns where the caller named none."""
    from mage import registry
    return custom or registry.role("custom"), baseline or registry.role("baseline")


def table(df: pd.DataFrame, shape_set: str = "field", custom: str | None = None, baseline: str | None = None) -> pd.DataFrame:
    """One row per drawn segment: op, shape, impl, dtype, stage, value (median µs), whole (the call's
    median µs), base (the baseline's whole call at the same precision, or FP32 when it has none)."""
    custom, baseline = _roles(custom, baseline)
    cols = ["op", "shape", "impl", "dtype", "stage", "value", "whole", "base"]
    if df is None or df.empty or "stage" not in df.columns:
        return pd.DataFrame(columns=cols)
    d = df[(df["view"] == VIEW) & (df["stat"] == "median") & (df["shape_set"] == shape_set)]
    d = d[d["impl"].isin([custom, baseline])]
    out = []
    for op in V.ops_in(d["op"]):
        shape = V.first_shape(d, op, shape_set)
        rows = d[(d["op"] == op) & (d["shape"] == shape)]
        base = {k: float(v) for k, v in rows[(rows["impl"] == baseline) & (rows["stage"] == WHOLE)]
                .groupby("dtype")["value"].first().items()}
        for (impl, dtype), g in rows.groupby(["impl", "dtype"], sort=False):
            stages = dict(zip(g["stage"], g["value"].astype(float)))
            if WHOLE not in stages:
                continue
            b = base.get(dtype, base.get("fp32", math.nan))
            parts = parts_of(stages) if impl == custom else [WHOLE]
            out += [dict(op=op, shape=shape, impl=impl, dtype=dtype, stage=s, value=stages[s],
                         whole=stages[WHOLE], base=b) for s in parts]
    t = pd.DataFrame(out, columns=cols)
    # operations in the specs' order, precisions in the precision table's; stages keep their order
    rank = {**{o: i for i, o in enumerate(V.ops_in(t["op"]))}, **{d: i for i, d in enumerate(_dtype_order(t["dtype"]))}}
    return t.sort_values(["op", "dtype"], key=lambda s: s.map(rank), kind="stable").reset_index(drop=True)


def _dtype_order(values) -> list:
    from mage.ops import PRECISIONS
    have = list(dict.fromkeys(values))
    return [p for p in PRECISIONS if p in have] + sorted(p for p in have if p not in PRECISIONS)


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def launch_breakdown(df: pd.DataFrame, machine: str, shape_set: str = "field", custom: str | None = None,
                     baseline: str | None = None):
    """Per operation (one button each), one horizontal bar per precision of ``custom`` split into the
    stages that make up its whole call, the baseline's whole call as its own bar, and a diamond at
    TARGET times the baseline on each of the custom bars."""
    custom, baseline = _roles(custom, baseline)
    t = table(df, shape_set, custom, baseline)
    t = t[t["op"].isin(t.loc[t["impl"] == custom, "op"])]
    if t.empty:
        return not_measured("Where a call's host time goes", machine,
                            "the launch path stage by stage (python -m mage launch-path)")
    stages = list(dict.fromkeys(s for s in t.loc[t["impl"] == custom, "stage"] if s not in (OTHER, WHOLE)))
    color = {s: STAGE_COLORS[i % len(STAGE_COLORS)] for i, s in enumerate(stages)}
    color[OTHER] = GREY
    fig, owner, labels = go.Figure(), [], []
    for op in V.ops_in(t["op"]):
        g = t[t["op"] == op]
        label = op_label(op)
        labels.append(label)
        bars = list(dict.fromkeys(zip(g["impl"], g["dtype"])))
        # the baseline's bars above the custom ones (y runs down the page)
        bars.sort(key=lambda b: b[0] != baseline)
        y = {b: f"{impl_label(b[0])}, {b[1]}" for b in bars}
        before = len(fig.data)
        for s in [s for s in stages + [OTHER] if s in set(g["stage"])]:
            r = g[(g["impl"] == custom) & (g["stage"] == s)]
            if r.empty:
                continue
            fig.add_trace(go.Bar(
                y=[y[(custom, d)] for d in r["dtype"]], x=[max(v, 0.0) for v in r["value"]], orientation="h",
                name=s, legendgroup=s, marker_color=color[s], marker_line=dict(color="#333", width=0.5),
                customdata=[[v, w, v / w if w else math.nan] for v, w in zip(r["value"], r["whole"])],
                hovertemplate=f"<b>%{{y}}</b><br>{s}: %{{customdata[0]:,.3~r}} µs "
                              "(%{customdata[2]:.0%} of %{customdata[1]:,.3~r} µs)<extra></extra>"))
        b = g[g["impl"] == baseline]
        fig.add_trace(go.Bar(
            y=[y[(baseline, d)] for d in b["dtype"]], x=list(b["value"]), orientation="h",
            name=f"{impl_label(baseline)}: whole call", marker_color=impl_color(baseline),
            marker_line=dict(color="#333", width=0.5), text=[_fmt(v) for v in b["value"]],
            textposition="outside", cliponaxis=False,
            hovertemplate="<b>%{y}</b><br>whole call: %{x:,.3~r} µs<extra></extra>"))
        c = g[g["impl"] == custom].drop_duplicates(["dtype"])
        fig.add_trace(go.Scatter(
            y=[y[(custom, d)] for d in c["dtype"]], x=list(TARGET * c["base"]), mode="markers+text",
            name=f"{TARGET:g} x {impl_label(baseline)}'s call", marker=dict(symbol="diamond", size=11,
                                                                              color="#000", line=dict(width=1, color="#fff")),
            text=[f"{w / base:.2f}x" if base == base and base else "" for w, base in zip(c["whole"], c["base"])],
            textposition="middle right", meta={"series": f"{TARGET:g} x {impl_label(baseline)}"},
            customdata=[[w, base] for w, base in zip(c["whole"], c["base"])],
            hovertemplate="<b>%{y}</b><br>whole call %{customdata[0]:,.3~r} µs, "
                          f"{impl_label(baseline)} %{{customdata[1]:,.3~r}} µs<br>{TARGET:g} x that: %{{x:,.3~r}} µs"
                          "<extra></extra>"))
        owner += [label] * (len(fig.data) - before)
    first = labels[0]
    for i, tr in enumerate(fig.data):
        tr.visible = owner[i] == first
    title = "Where a call's host time goes"
    buttons = [dict(label=lab, method="update", args=[{"visible": [o == lab for o in owner]},
                                                      {"title.text": f"{title}: {lab}"}]) for lab in labels]
    n = max(len(t.loc[t["op"] == op, ["impl", "dtype"]].drop_duplicates()) for op in V.ops_in(t["op"]))
    height = 260 + 42 * n
    fig.update_layout(
        barmode="stack", template="plotly_white", height=height, title=dict(text=f"{title}: {first}", x=0),
        margin=dict(t=120, l=150, r=60, b=50), legend=dict(orientation="h", x=0, y=-0.2, yanchor="top"),
        updatemenus=[dict(type="buttons", direction="right", buttons=buttons, active=0, x=0, y=1.02,
                          xanchor="left", yanchor="bottom", showactive=True)] if len(labels) > 1 else [])
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="host µs per call", rangemode="tozero")
    fig.layout.meta = {"narrow": {"margin.l": 100, "margin.r": 20, "legend.font.size": 10},
                       "narrow_height": height + 120, "narrow_font": 10}
    shapes = ", ".join(f"{op_label(o)} {t.loc[t['op'] == o, 'shape'].iloc[0]}" for o in V.ops_in(t["op"]))
    with_grid(fig, ["view", "x"], "name", ["operation", "column"])
    return with_caption(fig, (
        f"{machine}, {shape_set} shapes ({shapes}): host time per call, median of batches of back-to-back "
        "calls. Each stage is timed alone; the grey remainder is the whole call less the stages, the work "
        f"no stage names. Diamond: {TARGET:g} x {impl_label(baseline)}'s whole call at the same precision "
        "(FP32 where it has none), with the custom call's ratio to it."))
