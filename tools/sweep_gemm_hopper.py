"""A development sweep of matmul's Hopper road (kernels/matmul/triton_hopper.py) against the plain road
and cuBLAS, on one sm_90 GPU:

    python3 tools/sweep_gemm_hopper.py --out hopper_sweep.csv          # from the repository root
    python3 tools/sweep_gemm_hopper.py --quick --out smoke.csv         # one small size, base configs only

For each size (2048^3, 4096^3, 8192^3) and precision (tf32, fp32x3, bf16): every config of the Hopper
road's table, each again with B handed over K-major ('hopper_bnk': a Linear's W, no copy),
the plain road's default, and cuBLAS (torch.matmul: TF32 off for the FP32 baseline fp32x3 is compared
with, on for TF32; bf16 inputs for bf16). Each Triton call first writes into an output poisoned with
NaN and is checked against a float64 product of the same inputs (relative error in norm); a config with
a NaN or an error over twice the plain road's is rejected (timed nonetheless, marked). Times are
triton.testing.do_bench's (the median event span, L2 flushed between calls), the B copy included where a
road makes one. With ``--kernel-time``, beside them, the profiler's kernel time of a call (the sum of its
kernels, the copy included, no host time, the L2 not flushed), ten calls back to back: on an H100 it agreed
with do_bench (TF32 0.90 of cuBLAS against 0.89), where a profile of one call on a rested card had said
0.97: the clock under load, not host wait (kernels/NOTES.md). A config that fails to compile or launch is printed and skipped. Not the
record (that is ``mage measure``); its numbers go to kernels/NOTES.md as a development run.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

SIZES = (2048, 4096, 8192)
PRECISIONS = ("tf32", "fp32x3", "bf16")
BASELINE = {"tf32": "tf32", "fp32x3": "fp32", "bf16": "bf16"}  # the cuBLAS row each precision is compared with
REP_MS = {1024: 50, 2048: 80, 4096: 150, 8192: 250}  # do_bench's time budget a case (8192^3 FP32 cuBLAS: ~22 ms a call)
COLUMNS = ("size", "precision", "road", "config", "ms", "tflops", "ratio_to_cublas", "cublas", "rel_error",
           "status", "torch", "triton", "gpu", "kernel_ms", "kernel_ratio")


def _cublas(A, B, baseline):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = baseline == "tf32"
    return lambda: torch.matmul(A, B)


def _error(fn, out, want):
    """(relative error in norm against float64, NaN seen) of one call into a NaN-poisoned output."""
    import torch
    if out is not None:
        out.fill_(float("nan"))
    got = fn()
    torch.cuda.synchronize()
    nan = bool(torch.isnan(got).any())
    return float((got.double() - want).norm() / want.norm()), nan


def _cases(n, prec, quick, match="", overrides=()):
    """(road, config name, make(A, B, out) -> fn) of one size and precision: the plain road's default,
    the Hopper road's configs, each Hopper config again with B K-major already (the base where none matches),
    and each again with each of ``overrides`` (a dict of config keys: named NAME+KEY=VALUE)."""
    from kernels.matmul import triton_hopper as hop
    from kernels.matmul import triton_kernel as plain
    sizes = dict(M=n, K=n, N=n)
    yield "plain", plain.TILES[prec].name_at(sizes), lambda A, B, out: (lambda: plain.matmul(A, B, out=out, dtype=prec))
    table = hop.TILES[prec]
    wanted = (match,) if isinstance(match, str) else tuple(match)
    names = [table.base] if quick else [m for m in table.sweep if any(w in m for w in wanted)]
    variants = [(name, table[name]) for name in names]
    variants += [(name + "+" + ",".join(f"{k}={v}" for k, v in o.items()), dict(table[name], **o))
                 for o in overrides for name in names]
    for name, cfg in variants:
        yield "hopper", name, lambda A, B, out, cfg=cfg: (lambda: hop.gemm(A, B, precision=prec, out=out, **cfg))
    # each config again with B K-major (a Linear's weight, no copy); not the configs that exist to read an
    # N-major B in place ('_nc', '_sw'), which a K-major B sends down the base's road
    for name, cfg in [v for v in variants if "_nc" not in v[0] and "_sw" not in v[0]] or [(table.base, table[table.base])]:
        yield "hopper_bnk", name, lambda A, B, out, cfg=cfg: (
            lambda Bt=B.t().contiguous(): hop.gemm(A, Bt, precision=prec, b_nk=True, out=out, **cfg))


def _kernel_ms(fn, on):
    """The profiler's kernel time of one call of ``fn`` in ms (mean of 10), or '' when not asked for."""
    if not on:
        return ""
    from mage.profile import profile
    return profile(fn, iters=10, warmup=2).kernel_us / 1e3


def run(sizes, quick, out_path, precisions=PRECISIONS, match="", overrides=(), kernel_time=False):
    import torch
    import triton
    from triton.testing import do_bench
    env = dict(torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name())
    if torch.cuda.get_device_capability() != (9, 0):
        print(f"warning: {env['gpu']} is not sm_90; the Hopper road's TMA and wgmma need Hopper", flush=True)
    rows, t0 = [], time.time()
    for n in sizes:
        rep = REP_MS.get(n, 150) // (3 if quick else 1)
        flops = 2.0 * n ** 3
        g = torch.Generator(device="cuda").manual_seed(n)
        A32 = torch.randn(n, n, device="cuda", generator=g)
        B32 = torch.randn(n, n, device="cuda", generator=g)
        for prec in precisions:
            A, B = (A32.bfloat16(), B32.bfloat16()) if prec == "bf16" else (A32, B32)
            want = A.double() @ B.double()
            fn = _cublas(A, B, BASELINE[prec])
            cub_err, _ = _error(fn, None, want)
            cub_ms = do_bench(fn, warmup=max(rep // 4, 10), rep=rep, return_mode="median")
            cub_k = _kernel_ms(fn, kernel_time)
            torch.backends.cuda.matmul.allow_tf32 = False
            base = dict(size=n, precision=prec, cublas=f"cuBLAS {BASELINE[prec]}", **env)
            rows.append(dict(base, road="cublas", config=BASELINE[prec], ms=cub_ms, tflops=flops / cub_ms / 1e9,
                             ratio_to_cublas=1.0, rel_error=cub_err, status="ok", kernel_ms=cub_k,
                             kernel_ratio=1.0 if kernel_time else ""))
            _print(rows[-1])
            plain_err = None
            out = torch.empty(n, n, device="cuda", dtype=A.dtype)
            for road, name, make in _cases(n, prec, quick, match, overrides):
                try:
                    fn = make(A, B, out)
                    err, nan = _error(fn, out, want)
                    ms = do_bench(fn, warmup=max(rep // 4, 10), rep=rep, return_mode="median")
                    k_ms = _kernel_ms(fn, kernel_time)
                except Exception as e:  # noqa: BLE001 - a config that does not compile or launch: report, go on
                    print(f"{n} {prec} {road} {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                    rows.append(dict(base, road=road, config=name, ms="", tflops="", ratio_to_cublas="",
                                     rel_error="", status=f"failed: {type(e).__name__}"))
                    continue
                if road == "plain":
                    plain_err = err
                bad = nan or (plain_err is not None and road != "plain" and err > 2 * plain_err)
                rows.append(dict(base, road=road, config=name, ms=ms, tflops=flops / ms / 1e9,
                                 ratio_to_cublas=cub_ms / ms, rel_error=err, kernel_ms=k_ms,
                                 kernel_ratio=cub_k / k_ms if kernel_time else "",
                                 status="rejected: NaN" if nan else "rejected: error" if bad else "ok"))
                _print(rows[-1])
            del want, out
            torch.cuda.empty_cache()
        _write(out_path, rows)  # after each size: a run cut short keeps what it measured
    print(f"done in {time.time() - t0:.0f} s; {len(rows)} rows in {out_path}")
    _summary(rows)


def _print(r):
    kernel = f"  kernel {r['kernel_ms']:.3f} ms x{r['kernel_ratio']:.2f}" if r.get("kernel_ms") != "" else ""
    print(f"{r['size']:>5} {r['precision']:>6} {r['road']:>10} {r['config']:<28} {r['ms']:8.3f} ms "
          f"{r['tflops']:7.1f} TFLOP/s  x{r['ratio_to_cublas']:.2f} of {r['cublas']}  err {r['rel_error']:.2e}  {r['status']}"
          f"{kernel}", flush=True)


def _summary(rows):
    """The best accepted Triton row per size and precision, against cuBLAS: by do_bench's time, and by the
    profiler's kernel time where it was taken."""
    for key, ratio, what in (("ms", "ratio_to_cublas", "do_bench"), ("kernel_ms", "kernel_ratio", "kernel time")):
        best = {}
        for r in rows:
            if r["road"] != "cublas" and r["status"] == "ok" and r.get(key) not in ("", None):
                k = (r["size"], r["precision"])
                if k not in best or r[key] < best[k][key]:
                    best[k] = r
        if best:
            print(f"\nbest per size and precision by {what} (ratio: cuBLAS time / Triton time)")
        for (n, prec), r in sorted(best.items()):
            print(f"{n:>5} {prec:>6} {r['road']:>10} {r['config']:<28} x{r[ratio]:.2f} of {r['cublas']}")


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def _overrides(args) -> list:
    """``--override`` arguments as config dicts: 'SPLIT=2,GROUP_M=4' -> {'SPLIT': 2, 'GROUP_M': 4}, one a variant."""
    out = []
    for o in args:
        pairs = [kv.split("=") for kv in o.split(",")]
        if any(len(kv) != 2 or not kv[1].lstrip("-").isdigit() for kv in pairs):
            raise SystemExit(f"sweep_gemm_hopper: --override takes KEY=INTEGER[,KEY=INTEGER], got {o!r}")
        out.append({k: int(v) for k, v in pairs})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--quick", action="store_true", help="smoke test: 1024^3, base configs only, short timings")
    p.add_argument("--sizes", type=int, nargs="*", help=f"cube sizes (default {SIZES})")
    p.add_argument("--precisions", nargs="+", default=PRECISIONS, choices=PRECISIONS)
    p.add_argument("--match", nargs="+", default=[""],
                   help="only the Hopper configs whose name holds one of these (e.g. _split _ps)")
    p.add_argument("--override", nargs="+", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                   help="each matched config again with these config values (integers), one variant an argument")
    p.add_argument("--kernel-time", action="store_true",
                   help="also each call's kernel time from the profiler (columns kernel_ms, kernel_ratio)")
    a = p.parse_args(argv)
    overrides = _overrides(a.override)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: kernels, mage
    import torch
    if not torch.cuda.is_available():
        sys.exit("sweep_gemm_hopper: needs a CUDA GPU (an sm_90 one for the Hopper road)")
    run(a.sizes or ((1024,) if a.quick else SIZES), a.quick, a.out, a.precisions, a.match, overrides, a.kernel_time)


if __name__ == "__main__":
    main()
