"""The recorded tile sweep: one row per config (``tile_table``) and a slider over the configs
(``tile_explorer``). The reuse count of a tile comes from the op's ``reuse`` facet."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mage import facets
from mage import views as V
from mage.ops import OPS

from .figure_style import impl_color, impl_label, impls_in, not_measured, op_label, plain, with_caption

BLOCK_ORDER = ["BLOCK_M", "BLOCK_N", "BLOCK_I", "BLOCK_J", "BLOCK_K", "BLOCK_R", "BLOCK_C", "MAX_BLOCK_C"]


def reuse(op: str, config: dict) -> dict:
    """Distinct inputs loaded and multiply-adds per step of one program, from the op's reuse facet ({} for an
    operation without reuse to count)."""
    reuse = facets.get(op, "reuse", None) if op in OPS else None
    return reuse(config) if reuse else {}


def config_label(config: dict) -> str:
    """'128x64x16 w4 s3 g8': the block sizes in BLOCK_ORDER, then warps, stages, group."""
    c = dict(config)
    blocks = [k for k in BLOCK_ORDER if k in c] + sorted(k for k in c if "BLOCK" in k and k not in BLOCK_ORDER)
    s = "x".join(str(c[k]) for k in blocks)
    extra = [f"{k.replace('num_', '')[0]}{c[k]}" for k in ("num_warps", "num_stages") if k in c]
    extra += [f"g{c['GROUP_M']}"] if "GROUP_M" in c else []
    known = set(blocks) | {"num_warps", "num_stages", "GROUP_M"}
    extra += [f"{k}={c[k]}" for k in sorted(c) if k not in known]  # anything else a sweep varies
    return " ".join([s] + extra)


def _plain_config(op: str, impl: str, dtype: str) -> dict:
    """The first (plain) config of the implementation's tile sweep; {} for one this checkout lacks."""
    from mage import registry
    try:
        sweep = registry.get(op, impl, dtype).sweep
    except Exception:  # noqa: BLE001 - an implementation this checkout no longer has: the row as recorded
        sweep = ()
    return dict(sweep[0]) if sweep else {}


def complete_config(op: str, impl: str, dtype: str, config: str, plain=None) -> str:
    """A recorded config with the keys its implementation's sweep gained since, at the values of the
    sweep's plain first config (a key is added with the value that reproduces the kernel recorded before
    it, e.g. the neighbour kernel's ORDER=0), as sorted JSON: one config, one spelling. ``plain``: that
    first config when the caller has it already."""
    if not config:
        return config
    plain = _plain_config(op, impl, dtype) if plain is None else plain
    c = json.loads(config)
    if plain and set(c) & set(plain):  # the same sweep's keys (another column's configs are left alone)
        c = {**{k: v for k, v in plain.items() if k not in c}, **c}
    return json.dumps(c, sort_keys=True)


def tile_table(tiles: pd.DataFrame, op: str, tile_of: str = "field", dtype: str = "fp32") -> pd.DataFrame:
    """One row per recorded config, in the order recorded: kernel time, event span, achieved rates and
    the reuse count, at the first shape the config was recorded at (one precision: two precisions'
    sweeps share config names)."""
    h = V.headline(tiles, op=op, shape_set="tiles", dtype=dtype, view=["kernel_time", "event_span"])
    if "tile_of" in h:
        h = h[h["tile_of"].replace("", tile_of) == tile_of]
    if len(h):  # configs recorded before their sweep gained a key read as the configs they ran
        plain = {i: _plain_config(op, i, dtype) for i in set(h["impl"])}  # one registry look-up a column
        h = h.assign(config=[complete_config(op, i, dtype, c, plain[i]) for i, c in zip(h["impl"], h["config"])])
    rows = []
    for cfg, g in h.groupby("config", sort=False):
        if "run" in g and g["run"].nunique() > 1:  # the same config recorded again: the newest run's rows
            g = g[g["run"] == g["run"].max()]
        k = V.select(g, view="kernel_time")
        if k.empty or not cfg:
            continue
        k = k.iloc[0]
        s = V.select(g, view="event_span", shape=k["shape"])
        c = json.loads(cfg)
        r = dict(config=cfg, label=config_label(c), impl=k["impl"], shape=k["shape"], kernel_us=float(k["value"]),
                 span_us=float(s["value"].iloc[0]) if len(s) else math.nan,
                 gbps=float(k["achieved_gbps"]), tflops=float(k["achieved_tflops"]), **c)
        r.update(reuse(op, c))
        rows.append(r)
    return pd.DataFrame(rows)


def _reference(df: pd.DataFrame, op: str, shape: str, tile_impl: str, tile_of: str):
    """The kernel time of the op's first column (another implementation) at the sweep's shape, for scale."""
    h = V.headline(df, op=op, shape=shape, view="kernel_time", dtype="fp32", cache="warm")
    h = h[(h["shape_set"] != "tiles") & (h["impl"] != tile_impl)]
    if h.empty:
        return None
    h = h.assign(own=(h["shape_set"] != tile_of).astype(int)).sort_values("own", kind="stable")
    first = impls_in(h["impl"], op)[0]
    return first, float(h.loc[h["impl"] == first, "value"].iloc[0])


def tile_explorer(tiles: pd.DataFrame, df: pd.DataFrame, op: str, machine: str, tile_of: str = "field"):
    """A slider over the recorded tile sweep of one kernel: the chosen config is highlighted among all
    configs, with its reuse count and times; the op's first column's kernel time at the same shape is
    drawn for scale. Works in static HTML (no kernel runs)."""
    t = tile_table(tiles, op, tile_of)
    if t.empty:
        return not_measured(f"Tile sweep of {op_label(op)}", machine, f"a tile sweep of {op_label(op)} "
                            f"({tile_of} shapes)")
    impl = t["impl"].iloc[0]
    has_reuse = "fmas_per_load" in t
    # The second panel shows time against reuse; an operation without reuse to count gets one panel
    # (GB/s against time would be bytes over time again).
    if has_reuse:
        fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                            subplot_titles=["time per config", "time against reuse"])
    else:
        fig = make_subplots(rows=1, cols=1, subplot_titles=["time per config"])
    base = "#c9c9c9"
    hi = impl_color(impl)

    def colors(i):
        return [hi if j == i else base for j in range(len(t))]

    fig.add_trace(go.Bar(x=t["label"], y=t["kernel_us"], marker_color=colors(0), showlegend=False,
                         name="kernel time", meta={"series": "kernel time (µs)"},
                         customdata=np.stack([t["span_us"], t["gbps"], t["tflops"]], axis=-1),
                         hovertemplate="<b>%{x}</b><br>kernel %{y:,.3~r} µs<br>span %{customdata[0]:,.3~r} µs"
                                       "<br>%{customdata[1]:.0f} GB/s, %{customdata[2]:,.3~r} TFLOP/s<extra></extra>"),
                  row=1, col=1)
    if has_reuse:
        fig.add_trace(go.Scatter(x=t["fmas_per_load"], y=t["kernel_us"], mode="markers", showlegend=False,
                                 text=t["label"], name="kernel time against reuse", meta={"table": False},
                                 marker=dict(color=colors(0), size=12, line=dict(color="#555", width=1)),
                                 hovertemplate="<b>%{text}</b><br>%{x:,.3~r} multiply-adds per load"
                                               "<br>kernel %{y:,.3~r} µs<extra></extra>"),
                      row=1, col=2)
    shape = t["shape"].iloc[0]
    ref = _reference(df, op, shape, impl, tile_of)
    if ref is not None:
        fig.add_hline(y=ref[1], line=dict(color=impl_color(ref[0]), dash="dash"),
                      annotation_text=impl_label(ref[0]), annotation_position="top left", row=1, col=1)

    def note(i):
        r = t.iloc[i]
        txt = f"{r['label']}: kernel {plain(r['kernel_us'])} µs, span {plain(r['span_us'])} µs"
        if has_reuse:
            txt += f"; per K step {int(r['loads']):,} loads serve {int(r['fmas']):,} multiply-adds " \
                   f"({plain(r['fmas_per_load'])} per load)"
        else:
            txt += f"; {r['gbps']:,.0f} GB/s"
        return txt

    traces = [0, 1] if has_reuse else [0]
    steps = [dict(label=t["label"].iloc[i], method="update",
                  args=[{"marker.color": [colors(i)] * len(traces)}, {}, traces])
             for i in range(len(t))]
    fig.update_layout(
        height=480, template="plotly_white", margin=dict(t=90, b=150),
        title=dict(text=f"{impl_label(impl)} tile sweep of {op_label(op)}: one config at a time", x=0,
                   font=dict(size=13)),
        sliders=[dict(active=0, steps=steps, x=0, y=-0.32, len=1.0, pad=dict(t=10),
                      currentvalue=dict(prefix="config: ", font=dict(size=12)))])
    # Config labels are long: no tick labels (the slider and the table name each config).
    fig.update_xaxes(showticklabels=False, title_text="configs, in the order recorded", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    if has_reuse:
        fig.update_xaxes(type="log", title_text="multiply-adds per load", row=1, col=2)
    fig.update_yaxes(title_text="kernel time (µs)", row=1, col=1)
    # The readout under the slider: the chosen config's numbers (every step is a recorded config).
    narrow = {"margin.l": 40, "margin.r": 10}
    if has_reuse:  # (the full axis title is wider than the panel on a phone)
        narrow["xaxis2.title.text"] = "per load"
    fig.layout.meta = {"top": 30, "bottom": 50, "narrow": narrow, "narrow_height": 380,
                       "narrow_font": 10, "readout": [note(i) for i in range(len(t))]}
    blocks = " x ".join(k for k in BLOCK_ORDER if k in t.columns)
    return with_caption(fig, f"{machine}, recorded {impl_label(impl)} tile sweep of {op_label(op)} at {shape} "
                             f"({tile_of} shape), warm cache, FP32. Labels: {blocks}, then warps (w), stages (s) and "
                             "group (g). Move the slider to pick a config; the numbers are recorded, no kernel runs.")


# ------------------------------------------------------------------------ the explorer without a kernel
EXPLORER_JS = Path(__file__).resolve().parents[2] / "notes" / "js" / "tile-explorer.js"


def slider_keys(t: pd.DataFrame) -> list[str]:
    """The tile parameters of a recorded sweep, block sizes first."""
    first = json.loads(t["config"].iloc[0])
    return [k for k in BLOCK_ORDER if k in first] + [k for k in first if k not in BLOCK_ORDER]


def explorer_table(t: pd.DataFrame, op: str) -> tuple[list[str], dict, dict]:
    """(keys, options per key, {"v1|v2|...": {reuse, rec}}) over the recorded configs only, so that every
    position a slider offers is a measurement: a key's options are the values some recorded config has,
    and the page moves the other sliders to the nearest recorded config holding the chosen value. The
    reuse count comes from the op's reuse facet."""
    keys = slider_keys(t)
    options = {k: sorted({int(v) for v in t[k].dropna()}) for k in keys}
    combos = {}
    for r in t.itertuples(index=False):
        c = json.loads(r.config)
        if not all(k in c for k in keys):
            continue
        ru = reuse(op, {k: int(c[k]) for k in keys})
        combos["|".join(str(int(c[k])) for k in keys)] = dict(
            reuse={k: (int(v) if k != "fmas_per_load" else float(v)) for k, v in ru.items()} if ru else None,
            rec=dict(kernel_us=float(r.kernel_us), span_us=float(r.span_us), gbps=float(r.gbps)))
    return keys, options, combos


def tile_explorer_html(tiles: pd.DataFrame, op: str, machine: str, why: str, tile_of: str = "field") -> str:
    """One slider per tile parameter over a recorded sweep, computed in the page: each move shows the
    reuse count of the chosen tile and its recorded measurement (no kernel runs). '' without a sweep."""
    t = tile_table(tiles, op, tile_of)
    if t.empty:
        return ""
    keys, options, combos = explorer_table(t, op)
    first = json.loads(t["config"].iloc[0])
    # (``why`` the live widget cannot run is the building machine's state, not the reader's: not shown)
    spec = dict(label=f"{op_label(op)}, {impl_label(t['impl'].iloc[0])}", shape=str(t["shape"].iloc[0]),
                machine=machine, keys=keys, options=options,
                start={k: int(first[k]) for k in keys}, combos=combos)
    data = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
    return (f"<div class=\"mage-tiles\" data-op=\"{op}\">"
            f"<script type=\"application/json\" class=\"mage-tiles-json\">{data}</script>"
            f"<div class=\"mage-tiles-out\"></div>"
            f"<script>{EXPLORER_JS.read_text()}</script></div>")
