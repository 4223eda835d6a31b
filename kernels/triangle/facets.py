"""The triangle contraction's facets (``mage.facets``): how the book names and draws it, the reuse a
tile step makes of its inputs (the tile explorer), its speed targets, and its backward's cost for the
training experiment. Its mathematics is ``spec.py``."""
from mage import facets
from mage.book.target import Target

from .spec import SPEC


def reuse(config: dict) -> dict:
    """Per k step of one program (BLOCK_I x BLOCK_J outputs in BLOCK_C channels): distinct inputs
    loaded, multiply-adds, and their ratio."""
    bi, bj, bk, bc = config["BLOCK_I"], config["BLOCK_J"], config["BLOCK_K"], config["BLOCK_C"]
    loads, fmas = bc * (bi * bk + bk * bj), bc * bi * bj * bk
    return dict(loads=loads, fmas=fmas, fmas_per_load=fmas / loads)


facets.declare(
    SPEC.name, label="triangle contraction", short="triangle", order=40, marker="triangle-up", work="flops",
    reuse=reuse,
    # At FP32 accuracy (issue 14): the FMA-only kernel at least as fast as the einsum (permute copies
    # and cuBLAS's batched SGEMM), fp32x3 at least 1.5x it.
    targets=(Target("triton", "speedup", 1.0, baseline="pytorch"),
             Target("triton", "speedup", 1.5, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32"),
             Target("triton", "share_of_rate", 0.85),
             Target("rust", "share_of_rate", 0.60)),
    # backward: two more triangle contractions (dA from dO and B, dB from dO and A); read A, B, dO, write dA, dB
    grad_flops=lambda s: 4 * s["N"] ** 3 * s["C"],
    grad_bytes=lambda s, isz=4: isz * 5 * s["N"] * s["N"] * s["C"],
)
