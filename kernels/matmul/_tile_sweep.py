"""The tile sweep of matmul's tensor-core rows (fp32x3, TF32, bf16), on a GPU:

    python3 -m kernels.matmul._tile_sweep --out DIR [--dtypes fp32x3 tf32 bf16] [--sizes 4096 8192]

``python -m mage measure --tiles`` sweeps the fp32 rows only. This runs the harness's own per-config
case (``mage.measure.measure_case`` under ``TILE_SETTINGS``: every config checked against float64 first,
a failing one refused and recorded, then profiled and spanned) for the other precisions, with the
run's environment and ceilings measured first as ``measure`` does. Triton rows go to DIR/tiles.csv and
DIR/tile_checks.csv (``tile_of``: 'large' at the large shape, else 'extra'); the cuBLAS column (the
'pytorch' implementation; FP32 for fp32x3) is timed the same way beside them and kept out of the data
files. It prints, and writes to DIR/tile_summary.json, each config's kernel time and its speed against
cuBLAS. The module name starts with '_', so the registry does not import it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd

from mage import measure as m
from mage import ops, registry
from mage.data import merge_csv

OP = "matmul"
BASELINE = {"fp32x3": "fp32", "tf32": "tf32", "bf16": "bf16"}  # cuBLAS at the accuracy fp32x3 delivers


def _kernel_us(rows) -> float:
    k = [r["value"] for r in rows if r["view"] == "kernel_time" and r["round"] == 0 and r["stat"] == "mean"]
    return float(k[0]) if k else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m kernels.matmul._tile_sweep", description=__doc__.split("\n\n")[1])
    p.add_argument("--out", required=True)
    p.add_argument("--dtypes", nargs="+", default=list(BASELINE), choices=list(BASELINE))
    p.add_argument("--sizes", nargs="+", type=int, default=[4096], help="square sizes n (M = K = N = n)")
    p.add_argument("--defaults-only", action="store_true", help="time each precision's default config only")
    p.add_argument("--no-pin", action="store_true")
    a = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        sys.exit("kernels.matmul._tile_sweep: no CUDA device here; the tile sweep times kernels on a GPU")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = ops.get(OP)
    st = m.Settings()
    m.prepare_run(out, st, "python3 -m kernels.matmul._tile_sweep " + " ".join(sys.argv[1:]), log=m.stderr_log,
                  pin=not a.no_pin)
    tile = m.Settings(**m.TILE_SETTINGS, seed=st.seed, run=st.run, ceilings=st.ceilings, l2_bytes=st.l2_bytes)
    summary, t0 = [], time.perf_counter()
    for n in a.sizes:
        shape = dict(M=n, K=n, N=n)
        tile_of = "large" if shape in spec.shapes["large"] else "extra"
        base_us = {}
        for dt in dict.fromkeys(BASELINE[d] for d in a.dtypes):
            rows, _ = m.measure_case(spec, shape, tile_of, "warm", [registry.get(OP, "pytorch", dt)], tile,
                                     log=m.stderr_log)
            base_us[dt] = _kernel_us(rows)
            m.stderr_log(f"  cuBLAS {dt} n={n}: {base_us[dt]:.1f} us")
        for dt in a.dtypes:
            im = registry.get(OP, "triton", dt)
            configs = [im.config_at(shape)] if a.defaults_only else list(im.sweep)
            for i, cfg in enumerate(configs):
                v = im.variant(**cfg)
                rows, checks = m.measure_case(spec, shape, tile_of, "warm", [v], tile, log=m.stderr_log)
                for x in rows:  # labelled as ``measure --tiles`` labels its rows
                    x["tile_of"], x["shape_set"] = tile_of, "tiles"
                for x in checks:
                    x["config"] = json.dumps(v.config, sort_keys=True)
                if rows:
                    merge_csv(pd.DataFrame(rows), out / "tiles.csv", m.KEY + ["config"])
                if checks:
                    merge_csv(pd.DataFrame(checks), out / "tile_checks.csv",
                              ["op", "impl", "dtype", "shape", "dist", "config"])
                us = _kernel_us(rows)
                err = checks[0]["error"] if checks else float("nan")
                ratio = base_us[BASELINE[dt]] / us if math.isfinite(us) and us > 0 else math.nan
                summary.append(dict(dtype=dt, n=n, config=v.config, default=v.config == im.config_at(shape),
                                    passed=bool(checks and checks[0]["passed"]), error=err, kernel_us=us,
                                    cublas=BASELINE[dt], cublas_us=base_us[BASELINE[dt]], speedup=ratio))
                m.stderr_log(f"  [{time.perf_counter() - t0:6.1f}s] {dt} n={n} [{i + 1}/{len(configs)}] {v.config}: "
                             f"{us:.1f} us, {ratio:.3f}x cuBLAS {BASELINE[dt]}, error {err:.2e}")
    (out / "tile_summary.json").write_text(json.dumps(dict(run=st.run, rows=summary), indent=1))
    df = pd.DataFrame(summary)
    if len(df):
        df["config"] = df["config"].map(lambda c: " ".join(f"{k}={v}" for k, v in c.items()))
        for (dt, n), g in df.groupby(["dtype", "n"], sort=False):
            print(f"\n{dt} at {n}^3 against cuBLAS {BASELINE[dt]} ({g['cublas_us'].iloc[0]:.1f} us):")
            print(g.sort_values("kernel_us")[["kernel_us", "speedup", "error", "passed", "default", "config"]]
                  .to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\nwrote {out}/ (run {st.run}) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
