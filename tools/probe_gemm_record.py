"""Why the matmul record and the GEMM sweep disagree on our bf16 kernel (and not on cuBLAS's): each call's
kernel time, not only the mean, with the card's clocks read before and after each block of calls.

At 4096^3 the record (``mage measure``) read our bf16 kernel at 184-196 us a call where the sweep
(``sweep_gemm_hopper.py --kernel-time``) read 182, while cuBLAS read 171-176 in both. The two differ in how
they call (the registered column, which chooses its config from the shape, against ``gemm`` with the table's
base), in what runs before the profile (the record: the checks, then 5 calls; the sweep: do_bench's hundreds)
and in the order of the columns. This probe times, in blocks that alternate, cuBLAS, the registered column
and ``gemm`` with the base config, twice each way round, and writes every call's kernel time and each block's
clocks, so a slow block (clocks, warm-up) and a slow column (the call itself) tell themselves apart.

    python tools/probe_gemm_record.py --out data/h100/hopper/probe_record_<commit>.csv
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, iters: int, warmup: int) -> list:
    """Each call's time inside kernels (us), from one profile of ``iters`` calls after ``warmup``."""
    from mage.profile import profile
    return profile(fn, iters=iters, warmup=warmup).per_call_us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "tf32"))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--burn", type=float, default=0.0,
                    help="seconds of FP32 cuBLAS GEMMs first, as a record's earlier columns warm the card")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import torch
    import kernels  # noqa: F401 - registers the columns
    from mage import registry
    from mage.env import clocks
    from kernels.matmul import triton_hopper as hop
    from kernels.matmul.spec import make_inputs
    n, dt = a.n, a.dtype
    shape = dict(M=n, K=n, N=n)
    g = torch.Generator(device="cuda").manual_seed(0)
    A, B = make_inputs(shape, g, "cuda", dt, "normal")  # the record's inputs: B as [K, N]
    torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
    col = registry.get("matmul", "triton_hopper", dt)
    base = hop.TILES[dt][hop.TILES[dt].base]
    out = torch.empty(n, n, device="cuda", dtype=A.dtype)
    calls = {"cublas": lambda: torch.mm(A, B),
             "column": lambda: col.fn(A, B),  # as the record calls it: config from the shape, out allocated
             "gemm_base": lambda: hop.gemm(A, B, precision=dt, out=out, **base)}  # as the sweep calls it
    print(f"column's config at {shape}: {col.config_for(shape) if col.config_for else None}", flush=True)
    if a.burn:
        import time
        X = torch.randn(n, n, device="cuda")
        t0 = time.time()
        while time.time() - t0 < a.burn:
            for _ in range(20):
                X @ X
            torch.cuda.synchronize()
        del X
        print(f"burned {a.burn:.0f} s of FP32 GEMMs: {clocks()}", flush=True)
    order = ["cublas", "column", "gemm_base", "gemm_base", "column", "cublas"] * 2
    rows = []
    for block, name in enumerate(order):
        before = clocks()
        us = per_call_us(calls[name], a.iters, a.warmup)
        after = clocks()
        for i, t in enumerate(us):
            rows.append(dict(block=block, column=name, call=i, kernel_us=round(t, 3),
                             sm_mhz_before=before.get("sm_mhz"), sm_mhz_after=after.get("sm_mhz"),
                             power_w_after=after.get("power_w"), temp_c_after=after.get("temp_c"),
                             throttle_after=after.get("throttle"), burn_s=a.burn,
                             gpu=torch.cuda.get_device_name(), n=n, dtype=dt))
        print(f"block {block:2d} {name:10s} mean {statistics.mean(us):7.1f} median {statistics.median(us):7.1f} "
              f"min {min(us):7.1f} max {max(us):7.1f} us; sm {before.get('sm_mhz')} -> {after.get('sm_mhz')} MHz, "
              f"{after.get('power_w')} W, {after.get('temp_c')} C, throttle {after.get('throttle')}", flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
