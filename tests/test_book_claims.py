"""The guards of the book's written sentences (mage/book/guards.py): each passes on small hand-made data
that supports its sentence, raises ClaimFailed on data where the sentence flips, and reads a difference
within the harness's precision as a tie."""
import pandas as pd
import pytest

from mage.book import guards as K
from mage import views as V
from mage.ops import OPS
from tests.support.claim_rows import OP, frame, rows

BLOCK = next(n for n, s in OPS.items() if s.kind == "block")


def test_verdict_holds_flips_and_ties():
    df = frame(rows({"triton": 5.0, "pytorch": 10.0}))
    assert K.verdict(df, OP, "triton", "pytorch", "faster").b == 10.0
    with pytest.raises(K.ClaimFailed, match="slower"):
        K.verdict(frame(rows({"triton": 10.0, "pytorch": 5.0})), OP, "triton", "pytorch", "faster")
    # 2% apart: within the harness's 3%, so 'faster' fails and 'tie' holds
    near = frame(rows({"triton": 9.8, "pytorch": 10.0}))
    with pytest.raises(K.ClaimFailed):
        K.verdict(near, OP, "triton", "pytorch", "faster")
    assert K.verdict(near, OP, "triton", "pytorch", "tie").verdict == "tie"


def test_wide_rounds_widen_the_tie():
    df = frame(rows({"triton": 92.0, "pytorch": 100.0}, view="event_span", spread=0.10))
    assert K.verdict(df, OP, "triton", "pytorch", "tie", "event_span").tolerance >= 0.10
    df = frame(rows({"triton": 92.0, "pytorch": 100.0}, view="event_span", spread=0.001))
    K.verdict(df, OP, "triton", "pytorch", "faster", "event_span")


def test_leaders_must_be_exactly_the_set_named():
    df = frame(rows({"triton": 2.72, "torch_compile": 2.80, "pytorch": 6.5}))
    K.leaders(df, OP, {"triton", "torch_compile"})
    with pytest.raises(K.ClaimFailed):  # torch.compile falls behind: the 'tie' sentence no longer holds
        K.leaders(frame(rows({"triton": 2.72, "torch_compile": 3.2, "pytorch": 6.5})), OP, {"triton", "torch_compile"})
    with pytest.raises(K.ClaimFailed):  # eager catches up: three now share the lead
        K.leaders(frame(rows({"triton": 2.72, "torch_compile": 2.80, "pytorch": 2.75})), OP, {"triton", "torch_compile"})


def test_lead_by_returns_the_ratio_over_the_fastest_rival():
    df = frame(rows({"triton": 5.0, "torch_compile": 18.5, "cusparse": 18.7, "pytorch": 160.0}))
    x, rival = K.lead_by(df, OP, "triton", ("pytorch", "torch_compile", "cusparse"))
    assert rival == "torch_compile" and x == pytest.approx(3.7)
    with pytest.raises(K.ClaimFailed):
        K.lead_by(frame(rows({"triton": 16.0, "cusparse": 15.4})), OP, "triton", ("cusparse",))
    with pytest.raises(K.ClaimFailed):  # nothing to compare with is no lead
        K.lead_by(frame(rows({"triton": 16.0})), OP, "triton", ("cusparse",))


def test_blocks_against_the_fastest_pytorch_column():
    fast = frame(rows({"triton": 280.0, "pytorch": 500.0, "torch_compile": 456.0}, op=BLOCK))
    c, rival = K.block_against_fastest(fast, BLOCK, "fp32", "faster")
    assert rival == "torch_compile" and c.b / c.a == pytest.approx(456 / 280)
    assert K.speedup_range(fast, [BLOCK], "fp32") == pytest.approx((456 / 280, 456 / 280))
    tie = frame(rows({"triton": 50.3, "pytorch": 52.0, "torch_compile": 49.9}, op=BLOCK, dtype="bf16"))
    K.block_against_fastest(tie, BLOCK, "bf16", "tie")
    with pytest.raises(K.ClaimFailed):
        K.speedup_range(tie, [BLOCK], "bf16")


def test_views_disagree_needs_one_operation_whose_leaders_differ():
    k = rows({"triton": 3.0, "rust_ptx_py": 4.0})
    s = rows({"triton": 60.0, "rust_ptx_py": 40.0}, view="event_span", spread=0.001)
    assert K.views_disagree(frame(k, s)) == [OP]
    s = rows({"triton": 30.0, "rust_ptx_py": 40.0}, view="event_span", spread=0.001)
    with pytest.raises(K.ClaimFailed):
        K.views_disagree(frame(k, s))


def test_bounds_judged_values_and_checks():
    assert K.at_least(0.82, 0.5, "copies are most of a request") == 0.82
    with pytest.raises(K.ClaimFailed):
        K.at_least(0.35, 0.5, "copies are most of a request")
    with pytest.raises(K.ClaimFailed):
        K.at_most(3, 1, "one launch")
    with pytest.raises(K.ClaimFailed):
        K.at_least(float("nan"), 0.5, "not measured is not large")
    assert K.judged(7.9, 11.2, "faster", "Triton's kernel was faster").verdict == "faster"
    with pytest.raises(K.ClaimFailed):
        K.judged(24.3, 13.0, "faster", "Triton's span was shorter")
    checks = pd.DataFrame(dict(passed=["True", "True"]))
    assert K.all_checks_passed(checks) == 2
    with pytest.raises(K.ClaimFailed):
        K.all_checks_passed(pd.DataFrame(dict(passed=["True", "False"])))


def test_times_reads_plainly():
    assert [K.times(x) for x in (1.58, 3.0, 12.4, 0.5)] == ["1.6", "3.0", "12", "0.50"]


def test_smallest_sweep_range():
    if not V.shapes_of(OP, "sweep"):
        pytest.skip("the first operation lists no sweep shapes")
    df = frame(rows({"pytorch": 1.3, "triton": 6.5}, shape_set="sweep"))
    assert K.smallest_sweep(df) == (1.3, 6.5)
