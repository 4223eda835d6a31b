"""LayerNorm's facets (``mage.facets``): how the book names and draws it, its speed targets, and its
backward's cost for the training experiment. Its mathematics is ``spec.py``."""
from kernels._targets import MEMORY_BOUND
from mage import facets

from .spec import SPEC

facets.declare(
    SPEC.name, label="LayerNorm", short="LayerNorm", order=30, marker="diamond", work="bytes",
    targets=MEMORY_BOUND,
    # backward: read x, dy, gamma and the saved mean and 1/std per row (FP32 at any precision); write
    # dx, dgamma, dbeta
    grad_flops=lambda s: 12 * s["R"] * s["C"],
    grad_bytes=lambda s, isz=4: isz * (3 * s["R"] * s["C"] + 3 * s["C"]) + 4 * 2 * s["R"],
)
