"""The speed-target table is computed from recorded data, not typed: it runs on the committed H200 data."""
from pathlib import Path

import pandas as pd
import pytest

from mage import facets
from mage import views as V
from mage.book.target import Target
from mage.ops import OPS
from mage.data import load
from mage.book.targets import evaluate, markdown, targets

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


@pytest.mark.skipif(not (H200 / "large.csv").exists(), reason="no recorded H200 data")
def test_targets_from_the_recorded_data():
    t = targets(H200)
    want = sum(len(V.shapes_of(op, x.shape_set)) if x.shape is None else 1
               for op in OPS for x in facets.get(op, "targets", ()))
    assert len(t) == want and t["met"].dtype == bool
    # Every target is measured, except one whose implementation, precision or shape the record predates
    # (no row of it at all): that one reads "not measured" and is not met, never a guess.
    df = load(H200)
    recorded = set(zip(df["op"], df["impl"], df["dtype"], df["shape_set"], df["shape"]))
    missing = t[t["measured"].isna()]
    assert not any((r.op, r.impl, r.dtype, r.shape_set, r.shape) in recorded for r in missing.itertuples()), missing
    # ... and a shape the spec lists (a mistyped target shape would read "not measured" for ever)
    assert all(r.shape in V.shapes_of(r.op, r.shape_set) for r in missing.itertuples()), missing
    assert not missing["met"].any()
    md = markdown(t)
    assert md.startswith("| target |") and "rust bias_gelu large" in md


def _target_data(kernel_us: float):
    """One op's large shape: the baseline at 100 us, 'fast' at ``kernel_us``; a 1000 GB/s copy ceiling."""
    spec = next(iter(OPS.values()))
    shape = V.shapes_of(spec.name, "large")[0]
    base = dict(op=spec.name, dtype="fp32", shape=shape, shape_set="large", cache="warm", view="kernel_time",
                round=0, stat="mean", unit="us", bytes=1e8, flops=1e9, run="r1")
    df = pd.DataFrame([dict(base, impl="base", value=100.0), dict(base, impl="fast", value=kernel_us)])
    ceil = pd.DataFrame([dict(name="copy_gbps", value=1000.0, unit="GB/s", detail="", run="r1"),
                         dict(name="copy_gbps", value=9999.0, unit="GB/s", detail="", run="r0")])
    return spec.name, df, ceil


def test_a_target_is_met_only_when_measured_and_reached():
    op, df, ceil = _target_data(50.0)
    speed = Target("fast", "speedup", 1.5, baseline="base")
    assert evaluate(df, ceil, op, speed)[0]["met"]  # 100 / 50 = 2 >= 1.5
    assert not evaluate(df, ceil, op, Target("fast", "speedup", 2.5, baseline="base"))[0]["met"]
    missing = evaluate(df, ceil, op, Target("absent", "speedup", 0.1, baseline="base"))[0]
    assert not missing["met"] and pd.isna(missing["measured"]) and "not measured" in markdown(pd.DataFrame([missing]))
    # share of copy: 1e8 bytes in 50 us is 2000 GB/s over this run's (not another run's) 1000 GB/s
    share = evaluate(df, ceil, op, Target("fast", "share_of_copy", 0.9))[0]
    assert share["measured"] == pytest.approx(2.0) and share["met"]


def test_a_baseline_at_another_precision():
    """fp32x3 against cuBLAS FP32: the baseline row is looked up at ``baseline_dtype``; the share of
    rate counts three TF32 products per product (the ceiling is a third of the TF32 rate)."""
    op, df, ceil = _target_data(50.0)
    df.loc[df["impl"] == "fast", "dtype"] = "fp32x3"
    t = Target("fast", "speedup", 1.5, baseline="base", dtype="fp32x3", baseline_dtype="fp32")
    row = evaluate(df, ceil, op, t)[0]
    assert row["measured"] == pytest.approx(2.0) and row["met"] and "base fp32" in row["target"]
    assert pd.isna(evaluate(df, ceil, op, Target("fast", "speedup", 1.5, baseline="base", dtype="fp32x3"))[0]["measured"])
    ceil = pd.concat([ceil, pd.DataFrame([dict(name="tf32_tflops", value=60.0, unit="TFLOP/s", detail="", run="r1")])])
    rate = evaluate(df, ceil, op, Target("fast", "share_of_rate", 0.5, dtype="fp32x3"))[0]
    assert rate["measured"] == pytest.approx(1e9 / 50e-6 / 1e12 / 20.0)  # 20 TFLOP/s of useful products


def test_precision_separates_the_host_from_the_span():
    import pandas as pd
    from mage.book.targets import precision, precision_summary
    rows = []
    # impl a: the host's time moved 20 -> 60 us between rounds; span minus host stays at 300 us
    for impl, spans, hosts in (("a", [320, 320, 360], [20, 20, 60]), ("b", [300, 303, 297], [10, 10, 10])):
        for r, (s, h) in enumerate(zip(spans, hosts), start=1):
            for view, v in (("event_span", s), ("host_time", h)):
                rows.append(dict(op="x", impl=impl, dtype="fp32", shape="n=1", shape_set="large", cache="warm",
                                 view=view, round=r, stat="mean", value=float(v), unit="us"))
    p = precision(pd.DataFrame(rows)).set_index("impl")
    assert p.loc["a", "span_dev"] == pytest.approx(26.67 / 333.33, rel=1e-3) and p.loc["a", "rest_dev"] == 0
    assert p.loc["b", "span_dev"] == pytest.approx(0.01)
    assert precision_summary(pd.DataFrame(rows)).startswith("large shapes, warm: 1 of 2")
    assert p["drift"].isna().all()  # no run flagged drift in these rows


def test_precision_reads_drift_from_the_flags():
    import pandas as pd
    from mage.book.targets import precision_all, precision_summary
    base = dict(op="x", impl="a", dtype="fp32", shape="n=1", cache="warm", view="event_span", stat="mean", unit="us")
    rows = [dict(base, shape_set=ss, round=r, value=100.0 + r) for ss in ("large", "sweep") for r in (1, 2, 3)]
    rows += [dict(base, shape_set="sweep", round=0, value=102.0, flags="launch_bound;span_drift:12.5%;host_speed_moved"),
             dict(base, shape_set="large", round=0, value=102.0, flags="")]
    a = precision_all(pd.DataFrame(rows)).set_index("shape_set")
    assert a.loc["sweep", "drift"] == pytest.approx(0.125) and pd.isna(a.loc["large", "drift"])
    assert "1 drifted by over 3% in time order (worst 12.5%), and of those 1 still" in precision_summary(pd.DataFrame(rows))
