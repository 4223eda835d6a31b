"""A schema-valid, obviously fake data directory for developing and testing the book without a GPU.

    python tests/support/synthetic.py _scratch/synthetic          # then MAGE_DATA=_scratch/synthetic make book
    python tests/support/synthetic.py _scratch/field-only field   # only some shape sets (what `make measure` writes)

Numbers are drawn from a toy cost model (bytes over a bandwidth, FLOPs over a rate, a launch cost) plus
noise; the environment says SYNTHETIC everywhere. Never copy its output into data/.
"""
from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mage import ops  # noqa: E402
from mage.data import add_environment, save_csv  # noqa: E402

RUN = "synthetic-0"
# An eager MLP block's kernel profile (us per kernel), names as PyTorch, cuBLAS, torch.compile and the
# project's kernels print them: the Amdahl tests and the blocks page's tests share it.
EAGER_MLP = {
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, "
    "float const*, float const*, float const*, float*, float*, float*)": 10.0,
    "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    "__5x_cublas": 50.0,
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >": 20.0,
    "ampere_sgemm_128x64_tn": 15.0,
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >": 5.0,
}
CEIL = {"copy_gbps": 3900.0, "fp32_tflops": 51.0, "tf32_tflops": 380.0, "bf16_tflops": 700.0,
        "empty_kernel_us": 1.2, "empty_span_us": 22.0}


def _profile(rng, impl) -> tuple:
    """A made-up (efficiency against the floor, launches per call, host cost in us) for one column."""
    eff = {"pytorch": 0.6, "triton": 0.7, "rust": 0.4}.get(impl.family, 0.5) * rng.uniform(0.5, 1.2)
    return min(eff, 0.95), int(rng.integers(1, 4)) if impl.family == "pytorch" else 1, float(rng.uniform(4, 35))


def _floor_us(op, shape, dtype):
    flops, nb = ops.OPS[op].cost(shape, dtype)
    return flops, nb, max(nb / (CEIL["copy_gbps"] * 1e3), flops / (ops.peak_tflops(CEIL, dtype) * 1e6))


def _rows_for(rng, op, impl, family, eff, launches, host, dtype, shape, shape_set, cache, config="", spans_only=False):
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
    if not spans_only:
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


def make(out: Path, seed: int = 0, sets=("field", "large", "sweep", "tiles"), caches=("warm", "cold")) -> Path:
    """Every registered implementation of every spec, at the spec's shapes of ``sets``; the field shapes
    in ``caches``, the others warm. An implementation that times itself gets span rows only."""
    from mage import registry
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tables = {k: [] for k in sets}
    registry.load()  # every implementation module first: loading may find a spec folder added since
    for op, spec in list(ops.OPS.items()):
        for shape_set in [s for s in ("field", "large", "sweep") if s in sets]:
            for shape in spec.shapes.get(shape_set, []):
                for cache in (caches if shape_set == "field" else [c for c in caches if c == "warm"]):
                    for impl in registry.impls(op):
                        if shape_set == "sweep" and not impl.size_sweep:
                            continue
                        eff, la, host = _profile(np.random.default_rng(zlib.crc32(f"{op}/{impl.name}".encode())), impl)
                        tables[shape_set] += _rows_for(rng, op, impl.name, impl.family, eff, la, host, impl.dtype,
                                                       shape, shape_set, cache, spans_only=impl.own_spans is not None)
    if "tiles" in sets:
        for impl in registry.impls(dtype="fp32"):
            for shape_set in ("field", "large"):
                for shape in ops.OPS[impl.op].shapes.get(shape_set, []):
                    for i, cfg in enumerate(impl.sweep):
                        eff = 0.15 + 0.7 * rng.uniform() * (i + 1) / len(impl.sweep)
                        rows = _rows_for(rng, impl.op, impl.name, impl.family, eff, 1, 20, "fp32", shape, "tiles",
                                         "warm", config=json.dumps(cfg, sort_keys=True))
                        tables["tiles"] += [dict(r, tile_of=shape_set) for r in rows]
    for name, rows in tables.items():
        save_csv(pd.DataFrame(rows), out / f"{name}.csv")
    save_csv(pd.DataFrame([dict(name=k, value=v, unit="us" if k.endswith("_us") else k.split("_")[-1],
                                detail="synthetic", run=RUN) for k, v in CEIL.items()]), out / "ceilings.csv")
    checks = []
    for op in ops.OPS:
        for impl in registry.impls(op, dtype="fp32"):
            for dist in ("normal", "heavy"):
                checks.append(dict(op=op, impl=impl.name, dtype="fp32", shape=ops.shape_key(ops.OPS[op].shapes["field"][0]),
                                   dist=dist, error=1e-7, tolerance=ops.TOLERANCE["fp32"], passed=True, trials=3,
                                   reason="", run=RUN))
    save_csv(pd.DataFrame(checks), out / "checks.csv")
    env = out / "environment.json"
    if env.exists():
        env.unlink()
    add_environment(out, RUN, {"gpu": "SYNTHETIC GPU (fake numbers)", "sm_count": 132, "l2_bytes": 62914560,
                               "driver": "synthetic", "cuda": "synthetic", "torch": "synthetic", "triton": "synthetic",
                               "python": "synthetic", "date": "2026-12-02T00:00:00+00:00", "git_commit": "synthetic",
                               "command": "python tests/support/synthetic.py"})
    return out


if __name__ == "__main__":
    where = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "_scratch" / "synthetic")
    print(make(where, sets=tuple(sys.argv[2:]) or ("field", "large", "sweep", "tiles")))
