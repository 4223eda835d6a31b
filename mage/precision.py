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


# FP32 must catch a TF32 or FP16 slip (about 3e-4 and 5e-4), TF32 must catch bf16 (about 4e-3).
# fp32x3 keeps FP32 storage and FP32 accuracy on the tensor cores: each operand split into a TF32 high
# part and a TF32 remainder, three TF32 products (hi*hi + hi*lo + lo*hi) per product, so it is held to
# the FP32 tolerance and its ceiling is a third of the TF32 rate.
PRECISIONS = {
    "fp32": Precision(torch.float32, 5e-5, "fp32_tflops"),
    "fp32x3": Precision(torch.float32, 5e-5, "tf32_tflops", products=3),
    "tf32": Precision(torch.float32, 2e-3, "tf32_tflops"),
    "bf16": Precision(torch.bfloat16, 2e-2, "bf16_tflops"),
}
TOLERANCE = {k: p.tolerance for k, p in PRECISIONS.items()}
TORCH_DTYPE = {k: p.storage for k, p in PRECISIONS.items()}
FLOAT = (torch.float32, torch.bfloat16)


def peak_tflops(ceil, dtype: str) -> float:
    """The arithmetic ceiling for ``dtype`` in useful TFLOP/s, from a ceilings row."""
    p = PRECISIONS[dtype]
    return ceil[p.rate] / p.products
