"""The matmul's facets (``mage.facets``): how the book names and draws it, the reuse a tile step makes
of its inputs (the tile explorer), its speed targets, and its backward's cost for the training
experiment. Its mathematics is ``spec.py``."""
from mage import facets
from mage.book.target import Target

from .spec import SPEC


def reuse(config: dict) -> dict:
    """Per k step of one BLOCK_M x BLOCK_N output tile: distinct inputs loaded, multiply-adds, ratio
    (16 x 16 x 16 loads 512 values for 4096 multiply-adds: 8 per load)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    loads, fmas = bm * bk + bk * bn, bm * bn * bk
    return dict(loads=loads, fmas=fmas, fmas_per_load=fmas / loads)


facets.declare(
    SPEC.name, label="matmul", short="matmul", order=10, marker="circle", work="flops", reuse=reuse,
    # Against cuBLAS (the 'pytorch' column) at the large shapes. fp32x3 has no PyTorch row: FP32
    # accuracy from the library is cuBLAS's FP32 SGEMM, so that is its baseline.
    targets=(Target("triton", "speedup", 0.90, baseline="pytorch"),
             Target("rust", "speedup", 0.70, baseline="pytorch"),
             Target("triton", "speedup", 2.0, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32"),
             Target("rust", "speedup", 1.5, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32"),
             # issue 14 asks the fp32x3 target at 8192^3 too: the size sweep's last point
             Target("triton", "speedup", 2.0, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32",
                    shape_set="sweep", shape=dict(M=8192, K=8192, N=8192)),
             Target("triton", "speedup", 0.90, baseline="pytorch", dtype="tf32"),
             Target("triton", "speedup", 0.95, baseline="pytorch", dtype="bf16")),
    # backward: dA = dC B^T and dB = A^T dC, two products the size of the forward; read A, B, dC, write dA, dB
    grad_flops=lambda s: 4 * s["M"] * s["N"] * s["K"],
    grad_bytes=lambda s, isz=4: isz * (2 * s["M"] * s["K"] + 2 * s["K"] * s["N"] + s["M"] * s["N"]),
)
