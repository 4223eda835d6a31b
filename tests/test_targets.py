"""The speed-target table is computed from recorded data, not typed: it runs on the committed H200 data."""
from pathlib import Path

import pytest

from mage.targets import markdown, targets

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


@pytest.mark.skipif(not (H200 / "large.csv").exists(), reason="no recorded H200 data")
def test_targets_from_the_recorded_data():
    t = targets(H200)
    assert len(t) >= 20 and t["met"].dtype == bool
    assert not t["measured"].astype(str).str.contains("nan").any(), t[t["measured"].astype(str).str.contains("nan")]
    md = markdown(t)
    assert md.startswith("| target |") and "Rust bias_gelu large" in md


def test_precision_separates_the_host_from_the_span():
    import pandas as pd
    from mage.targets import precision, precision_summary
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
    from mage.targets import precision_all, precision_summary
    base = dict(op="x", impl="a", dtype="fp32", shape="n=1", cache="warm", view="event_span", stat="mean", unit="us")
    rows = [dict(base, shape_set=ss, round=r, value=100.0 + r) for ss in ("large", "sweep") for r in (1, 2, 3)]
    rows += [dict(base, shape_set="sweep", round=0, value=102.0, flags="launch_bound;span_drift:12.5%;host_speed_moved"),
             dict(base, shape_set="large", round=0, value=102.0, flags="")]
    a = precision_all(pd.DataFrame(rows)).set_index("shape_set")
    assert a.loc["sweep", "drift"] == pytest.approx(0.125) and pd.isna(a.loc["large", "drift"])
    assert "1 drifted by over 3% in time order (worst 12.5%), and of those 1 still" in precision_summary(pd.DataFrame(rows))
