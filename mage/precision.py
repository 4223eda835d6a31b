"""The arithmetic precisions, one table for everything: what each stores, the error it is allowed
against float64, and the ceiling its products run at. ``mage.ops`` re-exports these names."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Precision:
    """One arithmetic precision: what its tensors hold, the relative error ||out - ref|| / ||ref||
    allowed against float64, and the peak rate its products run at (a ceiling, divided by how many
    hardware products one product costs)."""
    storage: torch.dtype
    tolerance: float
    rate: str  # the ceiling's column: fp32_tflops, tf32_tflops or bf16_tflops
    products: int = 1
    # The elementwise bound beside the norm-wise one, torch.testing.assert_close's form: every element
    # |out - ref| <= atol + rtol * |ref|, with atol in units of the reference's root-mean-square (the
    # scale the norm-wise error is measured against), so scaling the inputs does not change the verdict.
    rtol: float = 0.0
    atol: float = 0.0


# FP32 must catch a TF32 or FP16 slip (about 3e-4 and 5e-4), TF32 must catch bf16 (about 4e-3).
# Elementwise, each precision's rtol is its norm-wise tolerance (bf16's 2e-2 holds the 2^-8 of one
# rounding, 2^-7 where the interpreter truncates) and its atol, in units of rms|ref|, four times that:
# room for the elements a sum cancels to near zero, where every FP32 CPU column at the awkward shapes
# needed under 0.03 x the tolerance. bf16's atol is 0.25: eager bf16 blocks round every intermediate,
# and the triangle block's needed up to 0.15 at heavy-tailed inputs; a zeroed element of typical size
# still fails.
PRECISIONS = {
    "fp32": Precision(torch.float32, 5e-5, "fp32_tflops", rtol=5e-5, atol=2e-4),
    "fp32x3": Precision(torch.float32, 5e-5, "tf32_tflops", products=3, rtol=5e-5, atol=2e-4),
    "tf32": Precision(torch.float32, 2e-3, "tf32_tflops", rtol=2e-3, atol=8e-3),
    "bf16": Precision(torch.bfloat16, 2e-2, "bf16_tflops", rtol=2e-2, atol=2.5e-1),
}
TOLERANCE = {k: p.tolerance for k, p in PRECISIONS.items()}
TORCH_DTYPE = {k: p.storage for k, p in PRECISIONS.items()}
FLOAT = (torch.float32, torch.bfloat16)


def peak_tflops(ceil, dtype: str) -> float:
    """The arithmetic ceiling for ``dtype`` in useful TFLOP/s, from a ceilings row."""
    p = PRECISIONS[dtype]
    return ceil[p.rate] / p.products
