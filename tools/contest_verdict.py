"""The GPU MODE ``trimul`` task's verdict for every column of the triangle update, both forms, on a GPU:
each element within rtol = atol = 2e-2 of an FP32 reference (``kernels/trimul_gpumode/spec.py``).

The reference here is the float64 reference of the column's own inputs, rounded to FP32: the task's
reference module run in FP32 with TF32 off differs from it by about 1e-6 relative, four orders below the
bound, so the verdict is the task's. For a failing draw the row says how many elements missed, by how
much, and how large the reference is there (near zero is where rounding the output to bf16 alone can
miss an absolute 2e-2), and the same output's verdict had it been rounded from the FP32 reference: what
bf16 storage of the output costs before any arithmetic does.

    python3 tools/contest_verdict.py --out data/h200      # rows in data/h200/contest/verdict.csv
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from mage import data, env, ops, registry
from mage.session import new_run_id
from kernels.trimul_gpumode.spec import contest_failures

# the block at the AF3-class sizes that fit a quick pass, the task's form at its own shapes
CASES = {"trimul_block": [dict(N=256, C=128, H=128), dict(N=512, C=128, H=128)],
         "trimul_gpumode": ops.get("trimul_gpumode").shapes["contest"]}


def verdict_rows(op: str, shapes, impl_names, seeds: int, log, device: str = "cuda") -> list[dict]:
    spec, rows = ops.get(op), []
    for impl in registry.impls(op, names=impl_names):
        if impl.runs_on(device):
            log(f"skip {op}/{impl.name}/{impl.dtype}: {impl.runs_on(device)}")
            continue
        for shape in shapes:
            for dist in ("normal", "heavy"):
                for seed in range(seeds):
                    inputs = spec.inputs(shape, seed=1000 + seed, device=device, dtype=impl.dtype, dist=dist)
                    ref32 = spec.reference(*inputs).float()
                    args = impl.prepare(*inputs) if impl.prepare else inputs
                    out = spec.empty_out(*inputs).fill_(float("nan"))
                    try:
                        impl.fn(*args, out=out)
                        torch.cuda.synchronize() if device == "cuda" else None
                    except Exception as e:  # noqa: BLE001 - a raising column is a row saying so
                        rows.append(dict(op=op, impl=impl.name, dtype=impl.dtype, shape=ops.shape_key(shape),
                                         dist=dist, seed=seed, failures=-1, reason=f"{type(e).__name__}: {e}"))
                        continue
                    err = (out.double() - ref32.double()).abs()
                    worst = int(torch.nan_to_num(err, float("inf")).argmax())
                    rounded = ref32.to(out.dtype)  # the reference itself stored in the column's dtype
                    rows.append(dict(
                        op=op, impl=impl.name, dtype=impl.dtype, shape=ops.shape_key(shape), dist=dist, seed=seed,
                        failures=contest_failures(out, ref32), elements=out.numel(),
                        max_abs_error=float(err.max()), ref_at_worst=float(ref32.flatten()[worst]),
                        ref_rms=float(ref32.double().pow(2).mean().sqrt()),
                        rel_error=float((out.double() - ref32.double()).norm() / ref32.double().norm()),
                        rounding_only_failures=contest_failures(rounded, ref32), reason=""))
                    log(f"{op}/{impl.name}/{impl.dtype} {ops.shape_key(shape)} {dist} seed {seed}: "
                        f"{rows[-1]['failures']} failures, max |err| {rows[-1]['max_abs_error']:.3g}")
                    del inputs, args, out, ref32
                torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the machine's data folder; rows go to <out>/contest/")
    ap.add_argument("--ops", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--impls", nargs="+", default=None)
    ap.add_argument("--seeds", type=int, default=2)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("contest_verdict: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the task's FP32: TF32 off
    out = Path(a.out) / "contest"
    e = env.environment(" ".join(sys.argv))
    data.ensure_same_machine(a.out, e)
    run = data.add_new_run(out, new_run_id, e)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    for op in a.ops:
        rows = verdict_rows(op, CASES[op], a.impls, a.seeds, log)
        if rows:
            data.merge_csv(pd.DataFrame(rows).assign(run=run), out / "verdict.csv",
                           ["op", "impl", "dtype", "shape", "dist", "seed", "run"])
    print(f"wrote {out}/verdict.csv (run {run}) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
