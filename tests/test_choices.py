"""The precision and layout tables (mage.book.choices) on hand-made rows: known times and errors give known
tables and sentences; a difference inside the harness's precision is a tie, never 'faster'."""
from __future__ import annotations

import json
import math

import pandas as pd

from mage.book import choices
from mage import views as V
from mage.ops import OPS, shape_key

OP = "matmul"
SHAPE = shape_key(OPS[OP].shapes["large"][0])
FLOPS = 2.0 * 4096 ** 3


def _rows(impl, dtype, us, shape_set="large", config="", run="r1"):
    base = dict(op=OP, impl=impl, dtype=dtype, shape=SHAPE, shape_set=shape_set, cache="warm", view="kernel_time",
                stat="mean", unit="us", run=run, flops=FLOPS, bytes=3 * 4 * 4096 ** 2, config=config,
                tile_of="large" if shape_set == "tiles" else "")
    return [dict(base, round=0, value=us), dict(base, round=1, value=us), dict(base, round=2, value=us)]


def _frame(*rows):
    return pd.DataFrame([r for rs in rows for r in rs])


CEIL = pd.DataFrame([dict(name=n, value=v, unit="TFLOP/s", detail="", run="r1")
                     for n, v in (("fp32_tflops", 50.0), ("tf32_tflops", 400.0), ("bf16_tflops", 800.0))])


def _checks(*entries):
    return pd.DataFrame([dict(op=OP, impl=i, dtype=d, shape=s, dist=dist, error=e, tolerance=1e-4, passed=True,
                              trials=1, reason="", ran=True, run="r1")
                         for i, d, s, e in entries for dist in ("normal", "heavy")])


def test_the_table_has_one_row_per_implementation_and_precision():
    df = _frame(_rows("pytorch", "fp32", 2700.0), _rows("triton", "fp32x3", 1600.0), _rows("pytorch", "tf32", 340.0))
    ch = _checks(("pytorch", "fp32", SHAPE, 1e-6), ("triton", "fp32x3", SHAPE, 2e-7), ("pytorch", "tf32", SHAPE, 3e-4))
    t, shape = choices.table(df, ch, CEIL, OP)
    assert shape == SHAPE
    assert list(t["precision"]) == ["fp32", "fp32x3", "tf32"]  # the precisions' own order
    x3 = t[t["precision"] == "fp32x3"].iloc[0]
    assert math.isclose(x3["TFLOP/s"], FLOPS / 1600e6)
    assert math.isclose(x3["share of the precision's peak"], FLOPS / 1600e6 / (400.0 / 3))  # a third of TF32
    assert x3["error against float64"] == 2e-7 and x3["bits kept"] == 22


def test_the_error_of_another_shape_is_the_largest_checked():
    ch = _checks(("triton", "fp32x3", "M=64,K=64,N=64", 1e-7), ("triton", "fp32x3", "M=1024,K=1024,N=1024", 3e-7))
    err, at = choices.errors(ch, OP, "triton", "fp32x3", SHAPE)
    assert (err, at) == (3e-7, "M=1024,K=1024,N=1024")
    assert math.isnan(choices.errors(ch, OP, "rust", "fp32", SHAPE)[0])


def test_the_sentence_is_computed_and_a_small_difference_is_a_tie():
    ch = _checks(("pytorch", "fp32", SHAPE, 1e-6), ("triton", "fp32x3", SHAPE, 2e-7))
    fast = _frame(_rows("pytorch", "fp32", 2700.0), _rows("triton", "fp32x3", 1600.0))
    s = choices.sentence(fast, ch, OP, "triton", "fp32x3", "pytorch", "fp32")
    assert "1.69 times as fast" in s and "lower than" in s
    assert "takes 1.69 times the kernel time of" in choices.sentence(fast, ch, OP, "pytorch", "fp32", "triton", "fp32x3")
    close = _frame(_rows("pytorch", "fp32", 1000.0), _rows("triton", "fp32x3", 990.0))  # 1%: inside 3%
    assert choices.against(close, OP, "triton", "fp32x3", "pytorch", "fp32").verdict == "tie"
    assert "about the same kernel time" in choices.sentence(close, ch, OP, "triton", "fp32x3", "pytorch", "fp32")
    assert "not both measured" in choices.sentence(fast, ch, OP, "rust", "fp32x3", "pytorch", "fp32")


def test_best_per_keeps_the_fastest_config_of_each_layout():
    cfg = lambda layout, store, bm: json.dumps(dict(LAYOUT=layout, STORE=store, BLOCK_M=bm, BLOCK_N=64, BLOCK_K=16),
                                              sort_keys=True)
    df = _frame(_rows("triton", "fp32", 900.0, "tiles", cfg("in_place", "direct", 64)),
                _rows("triton", "fp32", 800.0, "tiles", cfg("in_place", "direct", 128)),
                _rows("triton", "fp32", 400.0, "tiles", cfg("channel_major", "permute", 128)),
                _rows("triton", "fp32", 500.0, "tiles", cfg("channel_major", "direct", 128)),
                _rows("triton", "fp32", 300.0, "tiles", json.dumps(dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16))))  # no layout key: left out
    b = choices.best_per(df, OP, ("LAYOUT", "STORE"), "large", "fp32")
    assert list(zip(b["LAYOUT"], b["STORE"], b["kernel_us"])) == [
        ("channel_major", "permute", 400.0), ("channel_major", "direct", 500.0), ("in_place", "direct", 800.0)]
    assert choices.best_per(df, OP, ("NOPE",), "large", "fp32").empty
    assert V.PRECISION > 0.01  # the tie above rests on the harness's stated precision


def test_a_backward_row_is_never_read_as_the_forward_case():
    fwd = _rows("triton", "fp32", 1000.0)
    bwd = [dict(r, value=2000.0, **{"pass": "backward"}) for r in _rows("triton", "fp32", 0.0)]
    df = pd.DataFrame([dict(r, **{"pass": "forward"}) for r in fwd] + bwd)
    assert V.value(df, OP, "triton", shape_set="large") == 1000.0
    h = V.headline(V.select(df, **{"pass": "backward"}), op=OP)
    assert list(h["value"]) == [2000.0]


def test_a_figure_the_data_cannot_draw_is_one_line_of_words(monkeypatch):
    # an empty plot has no plotted values for its table, and the browser test refuses it
    import IPython.display
    from mage import book
    from mage.book.figure_style import not_measured
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    book.show(not_measured("Throughput against batch", "H200", "the batch sweep"))
    assert len(shown) == 1 and isinstance(shown[0], IPython.display.Markdown)
    assert "Throughput against batch" in shown[0].data and "not measured" in shown[0].data
