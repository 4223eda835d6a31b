"""Development sweep of the Triton tile configs on a GPU: check, then time each config of each op's
SWEEP at the field-note and large shapes next to the PyTorch baseline, and print one table.

    python3 -m kernels.triton_ops.sweep --out DIR [--ops matmul ...] [--budget-s 30]
    python3 -m kernels.triton_ops.sweep --precompile 8   # fill Triton's cache in parallel first

Times are triton.testing.do_bench medians with L2 flushed before every call (cold cache). The
official sweep is `mage`'s (mage.measure.measure_tiles); this script is for tuning by hand.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import triton

from mage import ops
from mage.check import rel_error
from kernels import pytorch_ops, triton_ops


def _bench_us(fn, rep_ms=25):
    return 1e3 * triton.testing.do_bench(fn, warmup=5, rep=rep_ms, return_mode="median")


def copy_gbps() -> float:
    x = torch.empty(1 << 28, device="cuda")  # 1 GiB
    y = torch.empty_like(x)
    return 2 * x.numel() * 4 / _bench_us(lambda: y.copy_(x)) / 1e3


def run(op_names, shape_sets, budget_s, log):
    rows = []
    bw = copy_gbps()
    log(f"copy bandwidth {bw:.0f} GB/s")
    for op in op_names:
        spec = ops.OPS[op]
        for shape_set in shape_sets:
            for shape in spec.shapes[shape_set]:
                inputs = spec.inputs(shape, seed=1, device="cuda")
                ref = spec.reference(*inputs)
                flops, nbytes = spec.cost(shape)
                torch.backends.cuda.matmul.allow_tf32 = False
                base = {"pytorch": _bench_us(lambda: pytorch_ops.EXPRS[op](*inputs))}
                if op == "neighbor_agg":
                    S, x = pytorch_ops._csr_prepare(*inputs)
                    base["cusparse"] = _bench_us(lambda: torch.sparse.mm(S, x))
                row0 = dict(op=op, shape=ops.shape_key(shape), shape_set=shape_set, flops=flops, bytes=nbytes,
                            copy_gbps=bw, **{f"{k}_us": v for k, v in base.items()})
                t_shape = time.time()
                for i, cfg in enumerate(triton_ops.sweep_configs(op)):
                    if time.time() - t_shape > budget_s and i > 0:
                        rows.append(dict(row0, config=json.dumps(cfg), idx=i, us=math.nan, error=math.nan,
                                         note="skipped: over budget"))
                        continue
                    v = triton_ops.variant(op, **cfg)
                    try:
                        args = v.prepare(*inputs) if v.prepare else inputs
                        t0 = time.time()
                        got = v.fn(*args)
                        torch.cuda.synchronize()
                        compile_s = time.time() - t0
                        err = rel_error(got, ref)
                        us = _bench_us(lambda: v.fn(*args)) if err <= ops.TOLERANCE["fp32"] else math.nan
                        note = "" if err <= ops.TOLERANCE["fp32"] else "FAILED check"
                    except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
                        err, us, compile_s, note = math.inf, math.nan, math.nan, f"raised {type(e).__name__}: {str(e)[:200]}"
                    r = dict(row0, config=json.dumps(cfg), idx=i, us=us, error=err, compile_s=compile_s, note=note,
                             tflops=flops / us / 1e6 if us == us else math.nan,
                             gbps=nbytes / us / 1e3 if us == us else math.nan)
                    rows.append(r)
                    log(f"{op} {r['shape']} [{i}] {cfg} -> {us:.1f} us err {err:.1e} "
                        f"({r['tflops']:.1f} TFLOP/s, {r['gbps']:.0f} GB/s; pytorch {base['pytorch']:.1f} us) {note}")
                del inputs, ref
                torch.cuda.empty_cache()
    return rows


def precision_rows(log):
    """TF32 and bf16 matmul at 4096 cubed, each tensor-core config against cuBLAS at that precision."""
    rows = []
    shape = dict(M=4096, K=4096, N=4096)
    for dtype in ("tf32", "bf16"):
        A, B = ops.OPS["matmul"].inputs(shape, seed=1, device="cuda", dtype=dtype)
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        cublas = _bench_us(lambda: A @ B)
        ref = ops.matmul_reference(A, B)
        for i, cfg in enumerate(triton_ops.sweep_configs("matmul", dtype)):
            v = triton_ops.variant("matmul", dtype=dtype, **cfg)
            try:
                err = rel_error(v.fn(A, B), ref)
                us = _bench_us(lambda: v.fn(A, B))
            except Exception as e:  # noqa: BLE001
                err, us = math.inf, math.nan
                log(f"matmul {dtype} [{i}] raised {e!r:.200}")
            rows.append(dict(op="matmul", dtype=dtype, shape=ops.shape_key(shape), config=json.dumps(cfg), idx=i,
                             us=us, error=err, cublas_us=cublas, tflops=2 * 4096 ** 3 / us / 1e6))
            log(f"matmul {dtype} [{i}] {cfg} -> {us:.1f} us ({2 * 4096 ** 3 / us / 1e6:.0f} TFLOP/s) "
                f"err {err:.1e}; cuBLAS {cublas:.1f} us")
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


_INPUTS: dict = {}


def _compile_one(task):
    """Worker: run one config once at one shape, so its compiled kernel lands in Triton's disk cache."""
    op, shape_set, dtype, cfg = task
    t0 = time.time()
    key = (op, shape_set, dtype)
    if key not in _INPUTS:
        _INPUTS.clear()
        shape = dict(M=4096, K=4096, N=4096) if dtype != "fp32" else ops.OPS[op].shapes[shape_set][0]
        _INPUTS[key] = ops.OPS[op].inputs(shape, seed=1, device="cuda", dtype=dtype)
    v = triton_ops.variant(op, dtype=dtype, **cfg)
    inputs = _INPUTS[key]
    try:
        v.fn(*(v.prepare(*inputs) if v.prepare else inputs))
        torch.cuda.synchronize()
        return f"compiled {op} {shape_set} {dtype} {cfg} in {time.time() - t0:.1f} s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED to compile {op} {shape_set} {dtype} {cfg}: {type(e).__name__}: {str(e)[:300]}"


def precompile(op_names, shape_sets, workers, precisions, log):
    """Compile every config in ``workers`` processes; compiling dominates a sweep's first pass."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    tasks = []
    for op in op_names:
        for shape_set in shape_sets:
            if op == "neighbor_agg" and shape_set == "large":
                continue  # same kernel specialisation as the field graphs; building 16M edges is slow
            tasks += [(op, shape_set, "fp32", cfg) for cfg in triton_ops.sweep_configs(op)]
    if precisions and "matmul" in op_names:
        tasks += [("matmul", "large", d, cfg) for d in ("tf32", "bf16") for cfg in triton_ops.sweep_configs("matmul", d)]
    tasks.sort(key=lambda t: (t[0], t[1]))  # neighbouring tasks share inputs in a worker
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for msg in pool.map(_compile_one, tasks, chunksize=4):
            log(msg)


def table(rows) -> str:
    import pandas as pd
    df = pd.DataFrame(rows)
    if df.empty:
        return "(no rows)"
    lines = []
    for (op, shape), g in df.groupby(["op", "shape"], sort=False):
        ok = g[g["us"].notna()]
        first = g[g["idx"] == 0].iloc[0]
        best = ok.loc[ok["us"].idxmin()] if len(ok) else first
        floor = first["bytes"] / first["copy_gbps"] / 1e3
        extra = f" cusparse {first['cusparse_us']:.1f}" if "cusparse_us" in g and first.get("cusparse_us") == first.get("cusparse_us") else ""
        lines.append(f"{op:12s} {shape:34s} first {first['us']:9.1f} us  best [{int(best['idx'])}] {best['us']:9.1f} us "
                     f"({best['tflops']:6.1f} TF/s, {best['gbps']:5.0f} GB/s, mem floor {floor:7.1f} us)  "
                     f"pytorch {first['pytorch_us']:9.1f} ({first['pytorch_us'] / best['us']:.2f}x){extra}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--precompile", type=int, default=0, metavar="N", help="only compile, in N processes")
    p.add_argument("--ops", nargs="*", default=list(ops.OPS))
    p.add_argument("--sets", nargs="*", default=["field", "large"])
    p.add_argument("--budget-s", type=float, default=30.0, help="seconds per shape before its remaining configs are skipped")
    p.add_argument("--precisions", action="store_true", help="also TF32 and bf16 matmul at 4096 cubed")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    logf = open(a.out / "sweep.log", "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    log(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    if a.precompile:
        t0 = time.time()
        precompile(a.ops, a.sets, a.precompile, a.precisions, log)
        log(f"precompiled in {time.time() - t0:.0f} s")
        return
    rows = run(a.ops, a.sets, a.budget_s, log)
    import pandas as pd
    pd.DataFrame(rows).to_csv(a.out / "sweep.csv", index=False)
    log("\n" + table(rows) + "\n")
    if a.precisions:
        prec = precision_rows(log)
        pd.DataFrame(prec).to_csv(a.out / "precisions.csv", index=False)


if __name__ == "__main__":
    sys.exit(main())
