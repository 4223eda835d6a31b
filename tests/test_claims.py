"""The book's computed sentences (mage/book/claims.py): each says what small hand-made data says, flips when
the data flips, reads a tie within the harness's precision, and never compares unlike with like."""
import json
import math

import pandas as pd
import pytest

from mage import facets
from mage import views as V
from mage.book import claims as C
from mage.ops import OPS
from tests.support.claim_rows import OP, frame, rows



def test_leader_alone_and_flipped():
    df = frame(rows({"pytorch": 10.0, "triton": 5.0}))
    assert C.leaders(df, OP).leaders == ("triton",)
    df = frame(rows({"pytorch": 5.0, "triton": 10.0}))
    assert C.leaders(df, OP).leaders == ("pytorch",)


def test_tie_within_precision_and_not_beyond():
    # 2.8701 against 2.8710: a tie, and the sentence says so with its tolerance
    ld = C.leaders(frame(rows({"torch_compile": 2.8701, "triton": 2.8710})), OP)
    assert set(ld.leaders) == {"torch_compile", "triton"} and ld.tie
    assert "tie" in ld.words() and "3%" in ld.words()
    ld = C.leaders(frame(rows({"torch_compile": 2.0, "triton": 2.8710})), OP)
    assert ld.leaders == ("torch_compile",) and "tie" not in ld.words()


def test_wide_round_spread_widens_the_tie():
    df = frame(rows({"pytorch": 100.0, "triton": 92.0}, view="event_span", spread=0.10))
    assert C.leaders(df, OP, "event_span").tie
    df = frame(rows({"pytorch": 100.0, "triton": 92.0}, view="event_span", spread=0.001))
    assert C.leaders(df, OP, "event_span").leaders == ("triton",)


def test_views_disagree_compares_like_with_like():
    k = rows({"pytorch": 5.0, "triton": 3.0, "rust_ptx_py": 4.0})
    s = rows({"pytorch": 50.0, "triton": 30.0, "rust_ptx_py": 40.0, "rust_native": 8.0}, view="event_span",
             spread=0.001)
    # rust_native has spans but no kernel time of its own: it cannot make the views disagree
    agree, lk, ls = C.views_disagree(frame(k, s), OP)
    assert agree is False and lk.leaders == ("triton",) and ls.leaders == ("triton",)
    # flip the span order: now they disagree
    s2 = rows({"pytorch": 50.0, "triton": 60.0, "rust_ptx_py": 40.0}, view="event_span", spread=0.001)
    assert C.views_disagree(frame(k, s2), OP)[0] is True


def test_views_disagree_tie_counts_as_agreement():
    k = rows({"pytorch": 5.0, "triton": 5.05})
    s = rows({"pytorch": 50.0, "triton": 40.0}, view="event_span", spread=0.001)
    assert C.views_disagree(frame(k, s), OP)[0] is False


def test_not_measured_is_not_a_winner():
    assert C.leaders(frame(rows({"pytorch": 5.0})), OP, "event_span").words() == "not measured"
    assert C.views_disagree(frame(rows({"pytorch": 5.0})), OP)[0] is None


def test_launch_path_same_ptx_only():
    s = rows({"rust_ptx_py": 60.0, "rust_native": 9.0, "pytorch": 1.0}, view="event_span", spread=0.001)
    text = C.launch_path(frame(s))
    assert "in 1 of 1 operations" in text and "6.7" in text
    s = rows({"rust_ptx_py": 60.0, "rust_native": 60.5}, view="event_span", spread=0.001)
    assert "in 0 of 1 operations" in C.launch_path(frame(s))


def test_checks_say_only_what_was_tested():
    c = pd.DataFrame(dict(op=[OP] * 3, impl=["a", "b", "b"], dtype="fp32", shape=["s1", "s1", "s2"],
                          dist="normal", passed=[True, True, False]))
    text = C.checks(c)
    assert "2 of 3" in text and "normal distribution" in text and "1 failed" in text
    assert "heavy" not in text
    c["dist"] = ["normal", "heavy_tailed", "normal"]
    assert "heavy_tailed and normal distributions" in C.checks(c)


def test_smallest_sweep_against_empty_kernel():
    ss = [s for s in V.shapes_of(OP, "sweep")]
    if not ss:
        pytest.skip("the first operation lists no sweep shapes")
    df = frame(rows({"pytorch": 1.3, "triton": 6.5}, shape_set="sweep"))
    ceil = pd.DataFrame(dict(name=["empty_kernel_us"], value=[0.65], run=["r1"]))
    text = C.smallest_sweep(df, ceil)
    assert "2 to 10 times" in text


def test_reuse_against_time_flips():
    op = next((o for o in OPS if facets.get(o, "reuse", None)), None)
    if op is None:
        pytest.skip("no operation counts reuse")
    reuse = facets.get(op, "reuse")
    cfgs = [c for c in getattr(__import__("mage.registry", fromlist=["x"]), "impls")() if c.op == op and c.sweep]
    sweep = list(cfgs[0].sweep) if cfgs else []
    ranked = sorted(sweep, key=lambda c: reuse(c).get("fmas_per_load", 0))
    if len(ranked) < 2 or reuse(ranked[0])["fmas_per_load"] == reuse(ranked[-1])["fmas_per_load"]:
        pytest.skip("the sweep has one reuse level")
    lo, hi = ranked[0], ranked[-1]

    def sweep_rows(t_lo, t_hi):
        return frame(rows({"triton": t_lo}, op=op, shape_set="tiles", config=json.dumps(lo)),
                     rows({"triton": t_hi}, op=op, shape_set="tiles", config=json.dumps(hi)))
    text, most, fast = C.reuse_against_time(sweep_rows(10.0, 40.0), op)
    assert "not the fastest" in text and math.isclose(most["kernel_us"], 40.0)
    text, most, fast = C.reuse_against_time(sweep_rows(40.0, 10.0), op)
    assert "not the fastest" not in text
