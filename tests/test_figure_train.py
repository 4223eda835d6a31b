"""The training chapter's figures and sentences (mage.book.figure_train, mage.book.training) from hand-made rows:
forward, backward and both rows of one operation, training-step rows of one block, and no rows at all
(each figure then says what is missing instead of drawing an empty plot)."""
import math

import pandas as pd
import pytest

from mage.book import figure_train as FT
from mage import facets, ops, registry
from mage.book import training as TR
from mage.data import REQUIRED
from mage.ext.training.passes import grad_cost

RUN = "20990101T000000Z-x"


def _op():
    """A memory-bound operation with a stated backward cost (found by kind and cost, not by name)."""
    for name in TR.operations():
        spec = ops.OPS[name]
        if facets.get(name, "grad_bytes", None) is not None and spec.shapes.get("large"):
            f, b = grad_cost(spec, spec.shapes["large"][0])
            if b / 3000e3 > f / 50e6:
                return name
    pytest.skip("no memory-bound operation with a backward cost")


def _block():
    return next(n for n, s in ops.OPS.items() if s.kind == "block")  # the first block in figure order


def _pass_rows(op, times, which=0):
    """Kernel-time rows of ``op`` at its large shape (the ``which``-th listed): times[impl][pass] us."""
    spec = ops.OPS[op]
    shape = spec.shapes["large"][which]
    key = ops.shape_key(shape)
    rows = []
    for impl, per in times.items():
        for p, us in per.items():
            flops, nbytes = spec.cost(shape) if p == "forward" else grad_cost(spec, shape)
            rows.append(dict(op=op, impl=impl, family=registry.get(op, impl).family, dtype="fp32", shape=key,
                             shape_set="large", cache="warm", run=RUN, source="measured", config="", view="kernel_time",
                             round=0, stat="mean", value=us, unit="us", flops=flops, bytes=nbytes, **{"pass": p}))
    return rows


def _train_rows(block, times):
    key = ops.shape_key(ops.OPS[block].shapes["field"][0])
    rows = []
    for dtype, per in times.items():
        for impl, us in per.items():
            base = dict(op=block, impl=impl, family=registry.get(block, impl).family, dtype=dtype, shape=key,
                        shape_set="train", cache="warm", run=RUN, source="measured", config="{}", **{"pass": "step"})
            rows += [dict(base, view="train_step", round=r, stat="mean", value=us, unit="us") for r in (0, 1, 2, 3)]
            rows.append(dict(base, view="throughput", round=0, stat="mean", value=1000 / (us * 1e-6), unit="items/s",
                             stage="items per step: 1000"))
    return rows


def _frame(rows):
    df = pd.DataFrame(rows)
    for c in REQUIRED:
        if c not in df.columns:
            df[c] = math.nan
    return df


def _ceilings(copy_gbps=3000.0):
    return pd.DataFrame([dict(name="copy_gbps", value=copy_gbps, unit="GB/s", detail="", run=RUN),
                         dict(name="fp32_tflops", value=50.0, unit="TFLOP/s", detail="", run=RUN),
                         dict(name="tf32_tflops", value=400.0, unit="TFLOP/s", detail="", run=RUN),
                         dict(name="bf16_tflops", value=800.0, unit="TFLOP/s", detail="", run=RUN)])


def test_no_rows_say_what_is_missing():
    empty = _frame([dict(op="x")]).iloc[:0]
    for fig in (FT.passes(empty, "card"), FT.steps(empty, "card")):
        assert fig.layout.meta["not_measured"] and "python -m mage" in fig.layout.meta["caption"]
    assert TR.pass_times(empty).empty and TR.train_table(empty).empty


def test_passes_figure_and_ratios():
    op = _op()
    custom, base = registry.role("custom"), registry.role("baseline")
    df = _frame(_pass_rows(op, {custom: dict(forward=10.0, backward=20.0, both=31.0),
                                base: dict(forward=15.0, backward=40.0, both=55.0)}))
    fig = FT.passes(df, "card")
    assert not (fig.layout.meta or {}).get("not_measured")
    ys = sorted(float(y) for t in fig.data for y in t.y)
    assert ys == [10.0, 15.0, 20.0, 31.0, 40.0, 55.0]


@pytest.mark.parametrize("bwd_us, met", [(None, True), (1e9, False)])
def test_copy_share_against_the_target(bwd_us, met):
    op = _op()
    spec = ops.OPS[op]
    _, nbytes = grad_cost(spec, spec.shapes["large"][0])
    at_target = nbytes / (3000.0 * 1e3) / TR.COPY_TARGET  # microseconds at exactly the target share
    us = at_target * 0.99 if bwd_us is None else bwd_us
    custom, base = registry.role("custom"), registry.role("baseline")
    df = _frame(_pass_rows(op, {custom: dict(backward=us), base: dict(backward=us)}))
    s = TR.copy_shares(df, _ceilings()).set_index("op")
    assert s.loc[op, "met"] is met
    assert s.loc[op, "verdict"] == "tie"  # same time as the only rival: a tie, never 'faster'


def test_every_recorded_large_shape_has_its_row():
    """An operation with two large shapes (the neighbour aggregation's two graphs) gets a row for each
    recorded backward, named apart in the findings; the second graph was left out before."""
    op = next((o for o in TR.operations() if len(ops.OPS[o].shapes.get("large", [])) > 1
               and facets.get(o, "grad_bytes", None) is not None), None)
    if op is None:
        pytest.skip("no operation with two large shapes and a backward cost")
    custom, base = registry.role("custom"), registry.role("baseline")
    times = {custom: dict(backward=100.0), base: dict(backward=300.0)}
    df = _frame(_pass_rows(op, times) + _pass_rows(op, times, which=1))
    s = TR.copy_shares(df, _ceilings(copy_gbps=1e-3))  # a tiny copy ceiling: every case memory-bound
    shapes = [ops.shape_key(x) for x in ops.OPS[op].shapes["large"][:2]]
    assert list(s[s["op"] == op]["shape"]) == shapes
    names = TR.case_names(s[s["op"] == op])
    assert len(set(names)) == 2 and all("(" in n for n in names)  # each names what sets it apart


def test_steps_figure_and_the_custom_verdict():
    block = _block()
    custom, base = registry.role("custom"), registry.role("baseline")
    df = _frame(_train_rows(block, {"fp32": {custom: 100.0, base: 150.0}, "bf16": {custom: 101.0, base: 100.0}}))
    fig = FT.steps(df, "card")
    assert [b["label"] for b in fig.layout.updatemenus[0].buttons] == ["FP32", "bf16 mixed precision"]
    c, rival, mine = TR.custom_against_fastest(df, block, "fp32")
    assert c.verdict == "faster" and rival == base and mine == custom
    c, _, _ = TR.custom_against_fastest(df, block, "bf16")
    assert c.verdict == "tie"  # 1% apart: within the harness's precision


def test_cost_table_comes_from_the_specs():
    t = TR.cost_table("large")
    assert set(t["op"]) <= set(TR.operations()) and len(t)
    for r in t.itertuples():
        f, b = grad_cost(ops.OPS[r.op], ops.OPS[r.op].shapes["large"][0])
        assert (r.bwd_flops, r.bwd_bytes) == (f, b)


def test_the_custom_verdict_takes_the_faster_custom_column():
    """A custom step replayed as one CUDA graph counts as the custom step when it is the faster of the two
    by span, and the same column is judged in kernel time; where only the plain column was measured, that
    one is compared."""
    block = _block()
    custom, base = registry.role("custom"), registry.role("baseline")
    graphed = custom + "_graphs"
    df = _frame(_train_rows(block, {"fp32": {custom: 200.0, graphed: 90.0, base: 150.0},
                                    "bf16": {custom: 200.0, base: 150.0}}))
    c, rival, mine = TR.custom_against_fastest(df, block, "fp32")
    assert (mine, rival, c.verdict, c.a) == (graphed, base, "faster", 90.0)
    c, _, mine = TR.custom_against_fastest(df, block, "bf16")
    assert (mine, c.verdict) == (custom, "slower")


