"""Two checks of what around our bf16 GEMM could move its kernel time at 4096^3, the median of 20 calls each
(``probe_gemm_record.per_call_us``), cuBLAS's beside it:

    python tools/probe_gemm_context.py order bf16_first   # bf16, then TF32 (our road), then bf16 again
    python tools/probe_gemm_context.py order tf32_first   # TF32 compiled and run first in the process
    python tools/probe_gemm_context.py address            # A, B and C placed after pads of 0-144 MB

Why: a matmul record read our bf16 kernel 188-200 us after its TF32 column in the same process, 176-179 us
otherwise, with cuBLAS at 170 in every case (kernels/NOTES.md, 2026-12-06). Run on 2026-12-06 from the device
folder at commits e25c582 and a44bf70 (``hopper/probe_order_*.txt``, ``probe_address_*.txt``), kept here since.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N = 4096


def _median_us(fn) -> float:
    from probe_gemm_record import per_call_us
    return statistics.median(per_call_us(fn, 20, 5))


def order(first: str) -> None:
    import torch
    from kernels.matmul import triton_hopper as hop
    g = torch.Generator(device="cuda").manual_seed(0)
    A32, B32 = (torch.randn(N, N, device="cuda", generator=g) for _ in range(2))
    Ab, Bb = A32.bfloat16(), B32.bfloat16()
    bf = lambda: hop.gemm(Ab, Bb, precision="bf16")  # noqa: E731
    tf = lambda: hop.gemm(A32, B32, precision="tf32")  # noqa: E731
    cb = lambda: torch.mm(Ab, Bb)  # noqa: E731
    seq = {"bf16_first": [("cublas", cb), ("bf16", bf), ("tf32", tf), ("bf16 again", bf), ("cublas", cb)],
           "tf32_first": [("tf32", tf), ("cublas", cb), ("bf16", bf), ("bf16 again", bf), ("cublas", cb)]}[first]
    for name, fn in seq:
        print(f"{first}: {name:12s} median {_median_us(fn):7.1f} us", flush=True)


def address() -> None:
    import torch
    from kernels.matmul import triton_hopper as hop
    g = torch.Generator(device="cuda").manual_seed(0)
    A0, B0 = (torch.randn(N, N, device="cuda", generator=g).bfloat16() for _ in range(2))
    keep = []  # the pads stay allocated, so each round's tensors land further on
    for pad_mb in [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144]:
        keep.append(torch.empty(pad_mb * 2**20 + 512, dtype=torch.uint8, device="cuda"))
        A, B = A0.clone(), B0.clone()
        out = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)
        ours = _median_us(lambda: hop.gemm(A, B, precision="bf16", out=out))
        ours_new = _median_us(lambda: hop.gemm(A, B, precision="bf16"))
        cub = _median_us(lambda: torch.mm(A, B))
        print(f"pad {pad_mb:4d} MB  A {A.data_ptr() % 2**30:#x} B {B.data_ptr() % 2**30:#x} "
              f"out {out.data_ptr() % 2**30:#x}: ours {ours:6.1f} (out per call {ours_new:6.1f}) cuBLAS {cub:6.1f} us  "
              f"ratio {cub / ours:.3f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["order"] and sys.argv[2:3] in (["bf16_first"], ["tf32_first"]):
        order(sys.argv[2])
    elif sys.argv[1:] == ["address"]:
        address()
    else:
        sys.exit(__doc__)
