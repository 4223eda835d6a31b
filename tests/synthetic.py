"""A schema-valid, obviously fake data directory for developing and testing the book without a GPU.

    python tests/synthetic.py _scratch/synthetic      # then MAGE_DATA=_scratch/synthetic make book

Numbers are drawn from a toy cost model (bytes over a bandwidth, FLOPs over a rate, a launch cost) plus
noise; the environment says SYNTHETIC everywhere. Never copy its output into data/.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mage import ops  # noqa: E402
from mage.data import add_environment, save_csv  # noqa: E402

RUN = "synthetic-0"
CEIL = {"copy_gbps": 3900.0, "fp32_tflops": 51.0, "tf32_tflops": 380.0, "bf16_tflops": 700.0,
        "empty_kernel_us": 1.2, "empty_span_us": 22.0}
RATE = {"fp32": "fp32_tflops", "tf32": "tf32_tflops", "bf16": "bf16_tflops"}
# (impl, family, efficiency against the floor, launches per call, host cost of the launch path in us)
IMPLS = {
    "matmul": [("pytorch", "pytorch", 0.8, 1, 14), ("torch_compile", "pytorch", 0.8, 1, 30),
               ("triton", "triton", 0.6, 1, 20), ("rust", "rust", 0.3, 1, 9), ("rust_scalar", "rust", 0.05, 1, 9),
               ("rust_ptx_py", "rust", 0.3, 1, 24)],
    "bias_gelu": [("pytorch", "pytorch", 0.5, 2, 18), ("torch_compile", "pytorch", 0.8, 1, 30),
                  ("triton", "triton", 0.8, 1, 20), ("rust", "rust", 0.7, 1, 9), ("rust_ptx_py", "rust", 0.7, 1, 24)],
    "layernorm": [("pytorch", "pytorch", 0.6, 1, 14), ("torch_compile", "pytorch", 0.8, 1, 30),
                  ("triton", "triton", 0.85, 1, 20), ("rust", "rust", 0.5, 1, 9), ("rust_ptx_py", "rust", 0.5, 1, 24)],
    "triangle": [("pytorch", "pytorch", 0.7, 3, 25), ("torch_compile", "pytorch", 0.7, 3, 35),
                 ("triton", "triton", 0.3, 1, 20), ("rust", "rust", 0.25, 1, 9), ("rust_ptx_py", "rust", 0.25, 1, 24)],
    "neighbor_agg": [("pytorch", "pytorch", 0.1, 4, 30), ("torch_compile", "pytorch", 0.3, 2, 35),
                     ("cusparse", "pytorch", 0.5, 1, 16), ("triton", "triton", 0.6, 1, 20), ("rust", "rust", 0.5, 1, 9),
                     ("rust_ptx_py", "rust", 0.5, 1, 24)],
}


def _floor_us(op, shape, dtype):
    flops, nb = ops.OPS[op].cost(shape, dtype)
    return flops, nb, max(nb / (CEIL["copy_gbps"] * 1e3), flops / (CEIL[RATE[dtype]] * 1e6))


def _rows_for(rng, op, impl, family, eff, launches, host, dtype, shape, shape_set, cache, config=""):
    flops, nb, floor = _floor_us(op, shape, dtype)
    kernel = floor / eff * (1.3 if cache == "cold" else 1.0) + launches * CEIL["empty_kernel_us"] * 1.5
    kernel *= rng.uniform(0.95, 1.05)
    span = max(kernel, host) + 0.3 * kernel + launches * 2.0
    graph = kernel + 2.5 * launches
    key = ops.shape_key(shape)
    names = "|".join(f"{op}_{impl}_kernel{i}" for i in range(launches))
    base = dict(op=op, impl=impl, dtype=dtype, shape=key, shape_set=shape_set, cache=cache, family=family,
                run=RUN, source="synthetic", config=config)

    def row(view, value, unit, rnd=0, stat="mean", **kw):
        r = dict(base, view=view, round=rnd, stat=stat, value=float(value), unit=unit, **kw)
        if unit == "us":
            r.update(flops=flops, bytes=nb, floor_us=floor, achieved_gbps=nb / (value * 1e3),
                     achieved_tflops=flops / (value * 1e6), frac_of_floor=floor / value)
        return r

    rows = []
    if impl != "rust_native":
        rows += [row("kernel_time", kernel, "us", kernel_names=names), row("launches", launches, "count",
                                                                          kernel_names=names),
                 row("prepare_time", rng.uniform(0.001, 2.0), "s")]
    if shape_set != "tiles":
        rows.append(row("graph_span", graph, "us"))
    means = span * rng.uniform(0.93, 1.07, size=3)
    for r, m in enumerate(means, start=1):
        for stat, f in (("n", None), ("mean", 1), ("median", 0.98), ("p20", 0.95), ("p80", 1.04), ("min", 0.9)):
            rows.append(row("event_span", 100 if f is None else m * f, "us", rnd=r, stat=stat,
                            order="pytorch>triton>rust"))
    flags = "launch_bound" if span > 2 * kernel else ""
    for stat, f in (("n", None), ("mean", 1), ("median", 0.98), ("p10", 0.93), ("p90", 1.06), ("min", 0.88),
                    ("max", 1.4)):
        rows.append(row("event_span", 300 if f is None else means.mean() * f, "us", stat=stat, flags=flags,
                        kernel_names=names))
    return rows


def make(out: Path, seed: int = 0) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tables = {k: [] for k in ("field", "large", "sweep", "tiles")}
    for op, impls in IMPLS.items():
        spec = ops.OPS[op]
        for shape_set in ("field", "large", "sweep"):
            for shape in spec.shapes[shape_set]:
                for cache in (("warm", "cold") if shape_set == "field" else ("warm",)):
                    for impl, fam, eff, la, host in impls:
                        tables[shape_set] += _rows_for(rng, op, impl, fam, eff, la, host, "fp32", shape, shape_set,
                                                       cache)
                    if shape_set == "field" and cache == "warm":
                        tables[shape_set] += _rows_for(rng, op, "rust_native", "rust", IMPLS[op][-1][2], 1, 4,
                                                       "fp32", shape, shape_set, cache)
                    if op == "matmul":
                        for dt in ("tf32", "bf16"):
                            for impl, fam, eff, la, host in impls[:3]:
                                tables[shape_set] += _rows_for(rng, op, impl, fam, eff, la, host, dt, shape,
                                                               shape_set, cache)
    try:
        from kernels import triton_ops
        sweeps = {op: triton_ops.sweep_configs(op) for op in IMPLS}
    except Exception:  # noqa: BLE001 - without Triton, a small hand-made sweep
        sweeps = {"matmul": [dict(BLOCK_M=b, BLOCK_N=b, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=3)
                             for b in (32, 64, 128)]}
    for op, configs in sweeps.items():
        for shape_set in ("field", "large"):
            for shape in ops.OPS[op].shapes[shape_set]:
                for i, cfg in enumerate(configs):
                    eff = 0.15 + 0.7 * rng.uniform() * (i + 1) / len(configs)
                    rows = _rows_for(rng, op, "triton", "triton", eff, 1, 20, "fp32", shape, "tiles", "warm",
                                     config=json.dumps(cfg, sort_keys=True))
                    tables["tiles"] += [dict(r, tile_of=shape_set) for r in rows]
    for name, rows in tables.items():
        save_csv(pd.DataFrame(rows), out / f"{name}.csv")
    save_csv(pd.DataFrame([dict(name=k, value=v, unit="us" if k.endswith("_us") else k.split("_")[-1],
                                detail="synthetic", run=RUN) for k, v in CEIL.items()]), out / "ceilings.csv")
    checks = []
    for op, impls in IMPLS.items():
        for impl, *_ in impls:
            for dist in ("normal", "heavy"):
                checks.append(dict(op=op, impl=impl, dtype="fp32", shape=ops.shape_key(ops.OPS[op].shapes["field"][0]),
                                   dist=dist, error=1e-7, tolerance=ops.TOLERANCE["fp32"], passed=True, trials=3,
                                   reason="", run=RUN))
    save_csv(pd.DataFrame(checks), out / "checks.csv")
    env = out / "environment.json"
    if env.exists():
        env.unlink()
    add_environment(out, RUN, {"gpu": "SYNTHETIC GPU (fake numbers)", "sm_count": 132, "l2_bytes": 62914560,
                               "driver": "synthetic", "cuda": "synthetic", "torch": "synthetic", "triton": "synthetic",
                               "python": "synthetic", "date": "2026-12-02T00:00:00+00:00", "git_commit": "synthetic",
                               "command": "python tests/synthetic.py"})
    return out


if __name__ == "__main__":
    print(make(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "_scratch" / "synthetic")))
