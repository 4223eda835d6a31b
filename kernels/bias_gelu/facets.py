"""Bias + GELU's facets (``mage.facets``): how the book names and draws it, its speed targets, and its
backward's cost for the training experiment. Its mathematics is ``spec.py``."""
from kernels._targets import MEMORY_BOUND
from mage import facets

from .spec import SPEC

facets.declare(
    SPEC.name, label="bias + GELU", short="bias+GELU", order=20, marker="square", work="bytes",
    targets=MEMORY_BOUND,
    # backward: read x and dy, write dx; db's column sums (read the bias, write db)
    grad_flops=lambda s: 10 * s["R"] * s["C"],
    grad_bytes=lambda s, isz=4: isz * (3 * s["R"] * s["C"] + 2 * s["C"]),
)
