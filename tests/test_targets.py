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
