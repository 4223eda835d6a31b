"""The training chapter's figures: each operation's kernel time forward, backward and both, per
implementation (one button per shape set), and each block's training step in items per second per
implementation (one button per precision). Rows come from ``mage.book.training``; a figure whose rows this
card did not record says so (``figure_style.not_measured``)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mage.book import training as TR

from .figure_blocks import NARROW, _buttoned, short_ticks
from .figure_style import (
    impl_color,
    impl_label,
    impls_in,
    not_measured,
    op_label,
    op_short,
    with_caption,
    with_grid,
)

PASS_LABEL = {"forward": "fwd", "backward": "bwd", "both": "both"}  # (short: five panels share a column)
SHORT_PASS = {"forward": "F", "backward": "B", "both": "F+B"}


def passes(df: pd.DataFrame, machine: str, shape_sets=("field", "large")):
    """Per operation (one panel each, its own scale), kernel time of the forward, the backward alone and
    both, one bar per implementation; one button per shape set."""
    tables = {s: TR.pass_times(df, s) for s in shape_sets}
    tables = {s: t for s, t in tables.items() if not t.empty}
    if not tables:
        return not_measured("Forward, backward and both", machine,
                            "the backward passes (python -m mage measure --passes forward backward both)")
    ops = list(dict.fromkeys(o for t in tables.values() for o in TR.operations() if o in set(t["op"])))
    fig = make_subplots(rows=1, cols=len(ops), subplot_titles=[op_short(o) for o in ops], horizontal_spacing=0.05)
    owner, seen = [], set()
    for g, (shape_set, t) in enumerate(tables.items()):
        for c, op in enumerate(ops, start=1):
            d = t[t["op"] == op]
            for impl in impls_in(d["impl"], op):
                r = d[d["impl"] == impl].set_index("pass").reindex(list(TR.PASSES))
                r = r.dropna(subset=["value"])
                if r.empty:
                    continue
                fig.add_trace(go.Bar(
                    x=[PASS_LABEL[p] for p in r.index], y=r["value"], name=impl_label(impl), legendgroup=impl,
                    showlegend=(impl, shape_set) not in seen, visible=g == 0, marker_color=impl_color(impl),
                    marker_line=dict(color="#333", width=0.6),
                    customdata=[[op_label(op), str(s), impl_label(impl)] for s in r["shape"]],
                    hovertemplate="<b>%{customdata[2]}</b>, %{customdata[0]} %{x}<br>kernel time %{y:,.3~r} µs"
                                  "<br>shape %{customdata[1]}<extra></extra>"), row=1, col=c)
                owner.append(shape_set)
                seen.add((impl, shape_set))
    buttons = [dict(label=f"{s} shapes", method="update", args=[{"visible": [o == s for o in owner]}])
               for s in tables]
    fig.update_layout(
        height=430, template="plotly_white", barmode="group",
        title=dict(text="Kernel time of the forward, the backward alone and both", x=0),
        margin=dict(t=120, l=55, r=15, b=50), legend=dict(orientation="h", x=0, y=-0.15, yanchor="top"),
        updatemenus=[dict(type="buttons", direction="right", buttons=buttons, active=0, x=0, y=1.12,
                          xanchor="left", yanchor="bottom", showactive=True)] if len(buttons) > 1 else [])
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title="kernel time (µs)", row=1, col=1)
    fig.update_xaxes(tickangle=0, tickfont=dict(size=10))
    # On a phone a panel is about 55 px wide: the passes' initials (spelled out in the caption) and
    # smaller panel titles, which otherwise ran into one another.
    narrow = dict(NARROW)
    for c in range(1, len(ops) + 1):
        ax = "xaxis" if c == 1 else f"xaxis{c}"
        narrow.update({f"{ax}.tickmode": "array", f"{ax}.tickvals": list(PASS_LABEL.values()),
                       f"{ax}.ticktext": [SHORT_PASS[p] for p in PASS_LABEL], f"{ax}.tickfont.size": 9})
    fig.layout.meta = {"narrow": narrow, "narrow_height": 560, "narrow_font": 9}
    with_grid(fig, ["view", "panel", "x"], "name", ["shapes", "operation", "pass"])
    shapes = "; ".join(f"{s}: " + ", ".join(f"{op_label(o)} {sh}" for o, sh in
                                           t[["op", "shape"]].drop_duplicates().itertuples(index=False))
                       for s, t in tables.items())
    return with_caption(fig, f"{machine}, FP32, warm inputs, kernel time per call (a profile of many "
                             f"calls, so no rounds and no whiskers). Backward: the gradients of every floating input "
                             f"with the forward outside the timed call; both: the two in one call (fwd, bwd, "
                             f"both; on a phone F, B, F+B). Shapes: {shapes}.")


def steps(df: pd.DataFrame, machine: str):
    """Items per second of a training step (forward, backward, AdamW) per block and implementation; one
    button per precision (FP32, bf16 mixed)."""
    t = TR.train_table(df)
    t = t[t["view"] == "throughput"] if len(t) else t
    if t.empty:
        return not_measured("Training step throughput", machine, "the training steps (python -m mage train)")
    groups = []
    for dtype in [d for d in ("fp32", "bf16") if d in set(t["dtype"])]:
        d = t[t["dtype"] == dtype]
        blocks = [b for b in TR.blocks(df) if b in set(d["block"])]
        traces = []
        for impl in impls_in(d["impl"]):
            r = d[d["impl"] == impl].set_index("block").reindex(blocks)
            traces.append(go.Bar(x=[f"{op_label(b)}<br>{s}" for b, s in zip(blocks, r["shape"].fillna(""))],
                                 y=r["value"], name=impl_label(impl), marker_color=impl_color(impl),
                                 marker_line=dict(color="#333", width=0.6),
                                 hovertemplate=f"<b>{impl_label(impl)}</b><br>%{{y:.3s}} items/s<extra></extra>"))
        label = "FP32" if dtype == "fp32" else "bf16 mixed precision"
        groups.append((label, traces))
    fig = _buttoned("Training step throughput", groups, y_title="items per second")
    fig.update_yaxes(type="log", rangemode=None, dtick=1)  # a label a decade (digit labels ran together)
    short_ticks(fig)
    with_grid(fig, ["view", "x"], "name", ["precision", "block"])
    return with_caption(fig, f"{machine}: one training step is a forward, a backward and a fused AdamW update of the "
                             "block's weights, timed as event spans; items are tokens, pairs or nodes per step. "
                             "Log scale: the blocks' items differ by orders of magnitude; compare within a block.")
