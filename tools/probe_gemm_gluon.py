"""On an sm_90 GPU: matmul's Gluon road (kernels/matmul/gluon_hopper.py), every config, beside cuBLAS and the Triton
Hopper road in one process. First its products at awkward shapes (M, N, K multiples of nothing TMA needs but 4) on
normal and heavy-tailed inputs, each into an output poisoned with NaN, against float64: the relative error in norm
and the worst element against |A| |B|, beside cuBLAS FP32's and the Triton road's on the same inputs. Then kernel
time (the profiler, mean of 10 calls) at 4096^3 and 8192^3 with B as [K, N], as `mage measure` hands it over. A
development probe: its numbers go to kernels/NOTES.md; the record is `mage measure --impls gluon_hopper`.

    python3 tools/probe_gemm_gluon.py [--sizes 4096]      # from the repository root
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.matmul import gluon_hopper as G  # noqa: E402
from kernels.matmul import triton_hopper as hop  # noqa: E402
from mage.profile import profile  # noqa: E402

CASES = [(p, c) for p in G.MODES for c in G.CONFIGS[p]]
AWKWARD = [(257, 260, 1000), (128, 132, 36), (1000, 388, 4100)]


def _inputs(M, N, K, heavy):
    A, B = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    if heavy:  # log-normal magnitudes: a few entries dominate each dot product
        A, B = A * torch.exp(2 * torch.randn_like(A)), B * torch.exp(2 * torch.randn_like(B))
    return A, B


def _error(got, A, B):
    want = A.double() @ B.double()
    d = got.double() - want
    scale = (A.double().abs() @ B.double().abs()).clamp_min(1e-300)
    return float(d.norm() / want.norm()), float((d.abs() / scale).max()), bool(torch.isnan(got).any())


def _cublas(A, B, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return torch.matmul(A, B)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def checks():
    for M, N, K in AWKWARD:
        for heavy in (False, True):
            A, B = _inputs(M, N, K, heavy)
            base = f"cuBLAS FP32 {_error(_cublas(A, B, False), A, B)[:2]}, Triton x3 " \
                   f"{_error(hop.gemm(A, B, precision='fp32x3'), A, B)[:2]}"
            for precision, name in CASES:
                out = torch.full((M, N), float("nan"), device="cuda")
                try:
                    r = _error(G.gemm(A, B, precision=precision, config=name, out=out), A, B)
                except Exception as e:  # noqa: BLE001 - a config that fails to compile or launch is reported
                    r = f"failed: {type(e).__name__}: {str(e)[:200]}"
                print(f"check {M}x{N}x{K} {'heavy' if heavy else 'normal'} {precision} {name}: {r} | {base}", flush=True)


def timing(n):
    A, B = _inputs(n, n, n, False)
    us = lambda fn: profile(fn, iters=10, warmup=2).kernel_us  # noqa: E731
    ref = {"FP32": us(lambda: _cublas(A, B, False)), "TF32": us(lambda: _cublas(A, B, True)),
           "triton fp32x3": us(lambda: hop.gemm(A, B, precision="fp32x3")),
           "triton tf32": us(lambda: hop.gemm(A, B, precision="tf32"))}
    print(f"time {n}^3 " + ", ".join(f"{k} {v:.1f} us" for k, v in ref.items()), flush=True)
    for precision, name in CASES:
        try:
            err = _error(G.gemm(A, B, precision=precision, config=name), A, B)[0]
            t = us(lambda: G.gemm(A, B, precision=precision, config=name))
        except Exception as e:  # noqa: BLE001
            print(f"time {n}^3 gluon {precision} {name}: failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        lib, road = ("FP32", "triton fp32x3") if precision == "fp32x3" else ("TF32", "triton tf32")
        print(f"time {n}^3 gluon {precision} {name}: {t:.1f} us, error {err:.2e}, x{ref[lib] / t:.2f} cuBLAS {lib}, "
              f"x{ref[road] / t:.2f} the Triton road", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    a = p.parse_args(argv)
    if not G.available():
        raise SystemExit("probe_gemm_gluon: needs an sm_90 GPU")
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    checks()
    for n in a.sizes:
        timing(n)


if __name__ == "__main__":
    main()
