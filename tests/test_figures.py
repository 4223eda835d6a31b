"""The figure functions on a synthetic data set (fake numbers, right schema): each returns a figure with
traces and a caption naming machine, cache and shapes; view buttons switch traces; the tile slider has a
step per recorded config; the pages' data setting fails clearly when the data is absent.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")

import mage  # noqa: E402
from mage import book, data, figures as F  # noqa: E402
sys.path.insert(0, str(Path(__file__).parent))
from synthetic import make  # noqa: E402


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
    n_ops = df["op"].nunique()
    assert len(fig.data) == n_ops * len(labels)
    masks = [tuple(b.args[0]["visible"]) for b in menu.buttons]
    assert len(set(masks)) == len(masks) and all(sum(m) == n_ops for m in masks)
    assert "GPU X" in fig.layout.meta["caption"] and "warm" in fig.layout.meta["caption"]


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


def test_reuse_count_of_a_16_tile():
    r = F.reuse("matmul", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16))
    assert (r["loads"], r["fmas"], r["fmas_per_load"]) == (512, 4096, 8.0)


def test_launch_overhead_is_span_minus_kernel(syn):
    df, _, _ = syn
    lo = F.launch_overhead(df)
    assert ((lo["span_us"] - lo["kernel_us"] - lo["overhead_us"]).abs() < 1e-9).all()
    assert "Rust PTX from Rust" in set(lo["path"])


def test_missing_data_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("MAGE_DATA", str(tmp_path / "nothing"))
    with pytest.raises(book.MissingData, match="MAGE_DATA"):
        book.data_dir()


def test_no_plotly_in_measuring_code():
    import re
    root = Path(mage.__file__).parent
    for f in root.glob("*.py"):
        if f.name != "figures.py":
            assert not re.search(r"^\s*(import|from) plotly", f.read_text(), re.M), f"{f.name} imports plotly"
