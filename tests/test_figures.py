"""The figure functions on a synthetic data set (fake numbers, right schema): each returns a figure with
traces and a caption naming machine, cache and shapes; view buttons switch traces; the tile slider has a
step per recorded config; the pages' data setting fails clearly when the data is absent.
"""
from __future__ import annotations

import json
import math
from types import SimpleNamespace
from pathlib import Path

import pytest

pytest.importorskip("plotly")

import mage
from mage import book, data
from mage.book import figures as F
from mage import views as V
from tests.support.synthetic import make


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    d = make(tmp_path_factory.mktemp("synthetic"))
    return mage.load(d), data.load_ceilings(d), d


def test_main_buttons_switch_views(syn):
    df, _, _ = syn
    fig = F.main(df, "GPU X")
    menu = fig.layout.updatemenus[0]
    labels = [b.label for b in menu.buttons]
    assert labels[:3] == ["GPU kernel time", "event span", "launches per call"]
    masks = [tuple(b.args[0]["visible"]) for b in menu.buttons]
    assert all(len(m) == len(fig.data) for m in masks)
    # every bar belongs to exactly one view, and each view shows a bar for every operation it measured
    assert all(sum(m[i] for m in masks) == 1 for i in range(len(fig.data)))
    assert len(set(masks)) == len(masks)
    for m in masks:
        shown = {t.xaxis for t, on in zip(fig.data, m) if on}
        assert len(shown) == len(V.ops_in(df["op"]))  # the operations: the model blocks have their own part
    assert "GPU X" in fig.layout.meta["caption"] and "warm" in fig.layout.meta["caption"]


def test_units_are_microseconds_and_one_colour_per_implementation(syn):
    df, ceil, _ = syn
    figs = [F.main(df, "GPU X"), F.combined(df, "GPU X"), F.op_views(df, "matmul", "GPU X"), F.warm_cold(df, "GPU X"),
            F.cost_vs_size(df, ceil, "GPU X"), F.launch_paths(df, ceil, "GPU X")]
    colour = {}
    for fig in figs:
        text = fig.to_json()
        assert " us" not in text and '"us"' not in text, "a unit written us"
        for t in fig.data:
            if t.type == "bar" and t.legendgroup and isinstance(t.marker.color, str):
                assert colour.setdefault(t.legendgroup, t.marker.color) == t.marker.color, t.legendgroup
    assert len(set(colour.values())) == len(colour)  # distinct implementations, distinct colours


def test_log_toggle_where_one_bar_dwarfs_the_rest(syn):
    from mage.book.figure_style import log_toggle
    import plotly.graph_objects as go
    df, _, _ = syn
    slow = df.copy()
    one = (slow["op"] == "matmul") & (slow["impl"] == "pytorch") & (slow["view"] != "launches")
    slow.loc[one, "value"] *= 200  # one bar far above the rest of its row
    fig = F.main(slow, "GPU X")
    scale = [m for m in fig.layout.updatemenus if any("log" in b.label for b in m.buttons)]
    assert scale and scale[0].buttons[1].args[0]["yaxis.type"] == "log"
    assert not log_toggle(go.Figure(), [1.0, 2.0], ["yaxis"]).layout.updatemenus  # comparable bars: none


def test_no_rotated_tick_labels(syn):
    df, ceil, _ = syn
    for fig in (F.main(df, "GPU X"), F.combined(df, "GPU X"), F.op_views(df, "matmul", "GPU X"),
                F.warm_cold(df, "GPU X"), F.cards(df, mage.load(book.PUBLISHED), "GPU X")):
        for k in fig.layout:
            if k.startswith("xaxis") and fig.layout[k].showticklabels is not False:
                assert fig.layout[k].tickangle in (None, 0), (fig.layout.title.text, k)


def test_every_figure_has_a_values_table(syn):
    from mage.book.figure_page import to_html, values_table
    df, ceil, _ = syn
    fig = F.main(df, "GPU X")
    table = values_table(fig)
    assert table.startswith("<details") and "<table>" in table and "GPU kernel time" in table
    # the opening figure is the original note's grid: a row per view and operation, a column per
    # implementation, every plotted value in one cell
    n_views, n_ops = len(fig.layout.updatemenus[0].buttons), len(V.ops_in(df["op"]))
    assert table.count("<tr>") - 1 == n_views * n_ops
    filled = [c for c in table.split("<td>")[1:] if not c.startswith("</td>")]
    assert len(filled) == sum(len(t.y) for t in fig.data)
    assert "e+" not in table and "e-0" not in table  # plain notation
    html = to_html(fig)
    assert 'class="mage-figure"' in html and "plotly.min.js" not in html and len(html) < 400_000
    assert "</script>" not in html.split('class="mage-figure-json">', 1)[1].split("</script>", 1)[0]


def test_tile_explorer_in_the_page(syn):
    """The static tile explorer carries the recorded configs only (every slider position is a
    measurement): the reuse count from the reuse facet and the recorded times; each option of each slider
    belongs to some recorded config."""
    from mage.book.figure_tiles import explorer_table, tile_explorer_html
    df, _, _ = syn
    tiles = df[df["shape_set"] == "tiles"]
    t = F.tile_table(tiles, "matmul")
    keys, options, combos = explorer_table(t, "matmul")
    assert len(combos) == t["config"].nunique() and all(c["rec"] for c in combos.values())
    for i, k in enumerate(keys):
        assert set(options[k]) == {int(key.split("|")[i]) for key in combos}
    for r in t.itertuples(index=False):
        c = json.loads(r.config)
        hit = combos["|".join(str(c[k]) for k in keys)]
        assert hit["rec"]["kernel_us"] == pytest.approx(r.kernel_us)
        assert hit["reuse"]["fmas_per_load"] == pytest.approx(F.reuse("matmul", c)["fmas_per_load"])
    html = tile_explorer_html(tiles, "matmul", "GPU X", "no GPU here")
    assert 'class="mage-tiles"' in html and "<script>" in html
    assert tile_explorer_html(tiles.iloc[0:0], "matmul", "GPU X", "no GPU here") == ""


def test_main_whiskers_are_round_ranges(syn):
    df, _, _ = syn
    b = F.bars(df)
    span = b[b["view"] == "event_span"]
    assert (span["lo"] <= span["value"]).all() and (span["hi"] >= span["value"]).all()
    assert b[b["view"] == "kernel_time"]["lo"].isna().all()


@pytest.mark.parametrize("kind", ["combined", "roofline", "cost_vs_size", "cards", "launch_paths", "warm_cold",
                                  "op_views", "amdahl"])
def test_every_figure_has_traces_and_caption(syn, kind):
    df, ceil, _ = syn
    pub = mage.load(book.PUBLISHED)
    fig = {"combined": lambda: F.combined(df, "GPU X"), "roofline": lambda: F.roofline(df, ceil, "GPU X"),
           "cost_vs_size": lambda: F.cost_vs_size(df, ceil, "GPU X"), "cards": lambda: F.cards(df, pub, "GPU X"),
           "launch_paths": lambda: F.launch_paths(df, ceil, "GPU X"), "warm_cold": lambda: F.warm_cold(df, "GPU X"),
           "op_views": lambda: F.op_views(df, "neighbor_agg", "GPU X"), "amdahl": lambda: F.amdahl(1.7, "GPU X")}[kind]()
    assert len(fig.data) > 0
    assert "GPU X" in fig.layout.meta["caption"]


def test_cards_label_published(syn):
    df, _, _ = syn
    fig = F.cards(df, mage.load(book.PUBLISHED), "GPU X")
    assert F.PUBLISHED_LABEL in {t.name for t in fig.data}
    assert "published" in fig.layout.meta["caption"]


def test_tile_explorer_slider(syn):
    df, _, _ = syn
    tiles = df[df["shape_set"] == "tiles"]
    fig = F.tile_explorer(tiles, df, "matmul", "GPU X")
    steps = fig.layout.sliders[0].steps
    assert len(steps) == F.tile_table(tiles, "matmul")["config"].nunique()
    colors = [json.dumps(s.args[0]["marker.color"]) for s in steps]
    assert len(set(colors)) == len(steps)
    # the line under the slider shows the chosen config's numbers
    readout = fig.layout.meta["readout"]
    assert len(set(readout)) == len(steps) and all("µs" in x and "per load" in x for x in readout)


def test_tile_explorer_without_reuse_has_no_bandwidth_scatter(syn):
    df, _, _ = syn
    tiles = df[df["shape_set"] == "tiles"]
    fig = F.tile_explorer(tiles, df, "layernorm", "GPU X")
    assert [t.type for t in fig.data] == ["bar"]


def test_reuse_count_of_a_16_tile():
    r = F.reuse("matmul", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16))
    assert (r["loads"], r["fmas"], r["fmas_per_load"]) == (512, 4096, 8.0)


def test_a_path_that_shares_kernels_is_charged_their_time(syn, monkeypatch):
    """An implementation that launches another's kernels (Impl.kernels_of) and records spans only gets
    its span minus the other one's kernel time, whatever it is called."""
    from mage.book import figure_costs
    from mage import views
    df, _, _ = syn
    b = views.bars(df)
    own = views.select(b, view="event_span")
    sharer = next(i for i in set(own["impl"]) if i not in set(views.select(b, view="kernel_time")["impl"]))
    donor = views.select(b, view="kernel_time")["impl"].iloc[0]
    monkeypatch.setattr(figure_costs, "impl_info", lambda name: SimpleNamespace(kernels_of=donor)
                        if name == sharer else None)
    lo = figure_costs.launch_overhead(df).set_index(["op", "impl", "view"])
    op = views.select(own, impl=sharer)["op"].iloc[0]
    want = views.value(df, op, sharer, "event_span") - views.value(df, op, donor, "kernel_time")
    assert lo.loc[(op, sharer, "event_span"), "overhead_us"] == pytest.approx(want)


def test_missing_data_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("MAGE_DATA", str(tmp_path / "nothing"))
    with pytest.raises(book.MissingData, match="MAGE_DATA"):
        book.data_dir()


def test_no_plotly_in_measuring_code():
    import re
    root = Path(mage.__file__).parent
    for f in root.glob("*.py"):
        if f.name != "figures.py" and not f.name.startswith("figure_"):
            assert not re.search(r"^\s*(import|from) plotly", f.read_text(), re.M), f"{f.name} imports plotly"


# ---------------------------------------------------------------- a card that measured only some shape sets
@pytest.fixture(scope="module")
def field_only(tmp_path_factory):
    """What the default `make measure` writes: field shapes, warm and cold, no sweep, large or tiles."""
    d = make(tmp_path_factory.mktemp("field_only"), sets=("field",))
    return mage.load(d), data.load_ceilings(d)


@pytest.mark.parametrize("kind", ["main", "combined", "roofline", "cost_vs_size", "cards", "launch_paths",
                                  "warm_cold", "op_views", "tile_explorer"])
def test_every_figure_builds_from_field_shapes_only(field_only, kind):
    df, ceil = field_only
    pub = mage.load(book.PUBLISHED)
    tiles = df[df["shape_set"] == "tiles"]
    fig = {"main": lambda: F.main(df, "GPU X"), "combined": lambda: F.combined(df, "GPU X"),
           "roofline": lambda: F.roofline(df, ceil, "GPU X"), "cost_vs_size": lambda: F.cost_vs_size(df, ceil, "GPU X"),
           "cards": lambda: F.cards(df, pub, "GPU X"), "launch_paths": lambda: F.launch_paths(df, ceil, "GPU X"),
           "warm_cold": lambda: F.warm_cold(df, "GPU X"), "op_views": lambda: F.op_views(df, "layernorm", "GPU X"),
           "tile_explorer": lambda: F.tile_explorer(tiles, df, "matmul", "GPU X")}[kind]()
    assert "GPU X" in fig.layout.meta["caption"]
    if kind in ("cost_vs_size", "tile_explorer"):  # no sweep, no tile sweep: said, not drawn
        assert F.NOT_MEASURED in fig.layout.annotations[0].text and F.NOT_MEASURED in fig.layout.meta["caption"]
    else:
        assert len(fig.data) > 0


def test_figures_without_cold_cache_say_so(tmp_path):
    df = mage.load(make(tmp_path, sets=("field",), caches=("warm",)))
    assert F.NOT_MEASURED in F.warm_cold(df, "GPU X").layout.meta["caption"]


# ------------------------------------------------------------------------------------------- data views
def test_select_by_keyword_and_refuse_unknown(syn):
    from mage import views
    from mage.errors import MageInputError
    df, _, _ = syn
    d = views.select(df, op="layernorm", view=["kernel_time", "launches"], cache="warm", shape_set="field")
    assert set(d["op"]) == {"layernorm"} and set(d["view"]) == {"kernel_time", "launches"}
    assert set(d["cache"]) == {"warm"} and set(d["shape_set"]) == {"field"}
    with pytest.raises(MageInputError, match="colour"):
        views.select(df, colour="red")


def test_headline_is_one_statistic_per_case(syn):
    from mage import views
    df, _, _ = syn
    h = views.headline(df, shape_set="field")
    assert not h.duplicated(["op", "impl", "dtype", "shape", "shape_set", "cache", "view", "config"]).any()
    r = h[(h["view"] == "event_span")].iloc[0]
    rows = views.select(df, op=r["op"], impl=r["impl"], dtype=r["dtype"], shape=r["shape"], shape_set="field",
                        cache=r["cache"], view="event_span", stat="mean")
    assert r["value"] == rows.loc[rows["round"] == 0, "value"].iloc[0]  # the overall mean, not a mix of stats
    means = rows.loc[rows["round"] > 0, "value"]
    assert (r["lo"], r["hi"]) == (means.min(), means.max())
    assert r["spread"] == pytest.approx(((means - means.mean()).abs().max()) / means.mean())


def test_compare_ties_within_the_measured_precision():
    from mage import views
    assert views.judge(100.0, 102.0).verdict == "tie"  # within the harness's 3%
    assert views.judge(100.0, 110.0).verdict == "faster"
    assert views.judge(110.0, 100.0).verdict == "slower"
    assert views.judge(100.0, 110.0, views.tie_tolerance(0.12)).verdict == "tie"  # rounds spread 12%
    assert views.judge(math.nan, 1.0).verdict == "not measured"


def test_headline_refuses_two_runs_of_one_case():
    # A frame loaded with run="all" holds several runs' numbers for a case; the views must not pick one.
    import pandas as pd
    from mage import views
    from mage.errors import MageInputError
    row = dict(op="matmul", impl="triton", dtype="fp32", shape="M=2,K=2,N=2", shape_set="field", cache="warm",
               view="kernel_time", round=0, stat="mean", unit="us")
    two = pd.DataFrame([dict(row, value=1.0, run="r1", config='{"B": 1}'), dict(row, value=2.0, run="r2", config='{"B": 2}')])
    with pytest.raises(MageInputError, match="holds 2 runs of the case matmul/triton"):
        views.headline(two)
    assert views.headline(two[two["run"] == "r2"])["value"].tolist() == [2.0]


def test_a_tile_recorded_before_its_sweep_gained_a_key_is_that_config():
    """The neighbour sweep gained ORDER after its tiles were recorded: an old row (no ORDER) and a new
    row of the same tile (ORDER=0) are one config, read from the newer run; ORDER=1 is another."""
    from mage.book.figure_tiles import complete_config
    old = json.dumps(dict(BLOCK_R=8, BLOCK_D=16, BLOCK_E=64, SPLIT=256, MAX_BLOCK_F=64, num_warps=4))
    new = json.dumps(dict(json.loads(old), ORDER=0))
    other = json.dumps(dict(json.loads(old), ORDER=1))
    assert complete_config("neighbor_agg", "triton", "fp32", old) == complete_config("neighbor_agg", "triton", "fp32", new)
    assert complete_config("neighbor_agg", "triton", "fp32", other) != complete_config("neighbor_agg", "triton", "fp32", new)
    shape = "n=8192,F=64,deg=16,dist=uniform"
    rows = [dict(op="neighbor_agg", impl="triton", dtype="fp32", shape=shape, shape_set="tiles", cache="warm",
                 run=run, config=cfg, view=view, stat="mean", value=us, achieved_gbps=1.0, achieved_tflops=0.1,
                 tile_of="field", source="measured", round=0)
            for run, cfg, us in (("20261202T000000Z-h200", old, 10.0), ("20261205T000000Z-h200", new, 9.0),
                                 ("20261205T000000Z-h200", other, 8.0))
            for view in ("kernel_time", "event_span")]
    import pandas as pd
    t = F.tile_table(pd.DataFrame(rows), "neighbor_agg")
    assert len(t) == 2 and sorted(t["kernel_us"]) == [8.0, 9.0] and set(t["ORDER"]) == {0, 1}


def test_another_machines_missing_folder_fails_clearly(monkeypatch, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "rows.csv").write_text("op\n")
    monkeypatch.setenv("MAGE_DATA", str(tmp_path / "mine"))
    with pytest.raises(book.MissingData, match="beside the book's data folder"):
        book.other_machine("h100")
