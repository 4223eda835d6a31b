"""A speed target an operation states (its ``targets`` facet), which ``mage.book.targets`` checks against a
recorded run."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Target:
    """A speed target, checked against a recorded run: ``impl`` at every shape of ``shape_set`` (or at
    ``shape`` only) must reach ``wanted`` in ``measure``: 'speedup' (the baseline's time over the impl's
    time in ``view``), 'share_of_copy' (compulsory bytes over time, over the run's copy bandwidth) or
    'share_of_rate' (FLOPs over time, over the run's matmul rate at the row's precision).
    ``baseline_dtype``: the baseline's precision when it differs (fp32x3 against cuBLAS FP32)."""

    impl: str
    measure: str
    wanted: float
    baseline: str = ""
    shape_set: str = "large"
    shape: Optional[dict] = None
    view: str = "kernel_time"
    dtype: str = "fp32"
    baseline_dtype: str = ""
