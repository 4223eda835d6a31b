"""The card's ceilings, measured in the same run as the kernels: copy bandwidth, matrix rates, launch cost.

Datasheet numbers are leads; these are what the floors and fractions in the data are computed from.
"""
from __future__ import annotations

import torch

from .profile import profile
from .timing import EventTimer, _quantile, spans, summarize


def _median_us(fn, reps=20, warmup=3) -> float:
    for _ in range(warmup):
        fn()
    timer = EventTimer()
    return _quantile(sorted(timer(fn) for _ in range(reps)), 0.5)


def copy_gbps(sizes_gib=(0.5, 1.0, 2.0, 4.0), repeats: int = 3) -> tuple[float, str]:
    """Device-to-device copy, bytes read plus bytes written over time: the best of several buffer sizes
    and repeats (a median of 20 copies each), because one size in one pass moved by 2-3% between runs
    and every bandwidth share moves with it."""
    best, where = 0.0, ""
    for gib in sizes_gib:
        n = int(gib * 2**30) // 4
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(repeats):
            gbps = 2 * n * 4 / (_median_us(lambda: dst.copy_(src)) * 1e-6) / 1e9
            if gbps > best:
                best, where = gbps, f"{gib:g} GiB"
        del src, dst
    sizes = ", ".join(f"{g:g}" for g in sizes_gib)
    return best, f"best of {sizes} GiB buffers x {repeats} repeats (median of 20 copies each): {where}"


def matmul_tflops(dtype: str, n: int = 8192) -> tuple[float, str]:
    """cuBLAS through torch.mm on random data at n x n x n."""
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    A = torch.randn(n, n, device="cuda").to(dt)
    B = torch.randn(n, n, device="cuda").to(dt)
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        us = _median_us(lambda: A @ B, reps=10)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n**3 / (us * 1e-6) / 1e12, f"torch.mm {n}^3 {dtype}, median of 10"


def empty_kernel() -> dict:
    """Kernel time and event span of the smallest launch PyTorch makes (a zero-cycle sleep kernel)."""
    fn = lambda: torch.cuda._sleep(0)  # noqa: E731
    prof = profile(fn, iters=100)
    sp = spans({"empty": fn}, n=300, rounds=3)
    return {"empty_kernel_us": prof.kernel_us,
            "empty_span_us": summarize([x for r in sp.samples["empty"] for x in r])["mean"]}


def measure_all(dtypes=("fp32", "tf32", "bf16")) -> list[dict]:
    """Rows for ceilings.csv (without the run id)."""
    rows = []
    v, d = copy_gbps()
    rows.append({"name": "copy_gbps", "value": v, "unit": "GB/s", "detail": d})
    for dt in dtypes:
        v, d = matmul_tflops(dt)
        rows.append({"name": f"{dt}_tflops", "value": v, "unit": "TFLOP/s", "detail": d})
    for k, v in empty_kernel().items():
        rows.append({"name": k, "value": v, "unit": "us", "detail": "torch.cuda._sleep(0): 100 profiled calls; 300 spans"})
    return rows
