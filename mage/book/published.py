"""The original field note's published RTX 4090 figures, brought into mage's schema once.

They are published numbers, not our measurements: no rounds, no shapes, and a source that says so.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from mage.data import REQUIRED, add_environment, save_csv


def import_published(src: Path, out_dir: Path) -> pd.DataFrame:
    raw = pd.read_csv(src)
    df = pd.DataFrame({
        "op": raw["op"], "impl": raw["impl"], "dtype": "fp32", "shape": "unpublished",
        "shape_set": "published", "cache": "n/a", "view": raw["view"], "round": 0, "stat": "mean",
        "value": raw["value"], "unit": raw["unit"], "family": raw["impl"],  # the published columns are one per family
        "source": "published: " + raw["source"], "run": "rtx4090-published",
    })
    assert list(df.columns[: len(REQUIRED)]) == REQUIRED
    save_csv(df, Path(out_dir) / "published.csv")
    add_environment(out_dir, "rtx4090-published", {
        "gpu": "NVIDIA GeForce RTX 4090", "platform": "WSL", "source": "published figures of the original "
        "field note (not measured by this project); its shapes were not published; Rust built with cuda-oxide"})
    return df
