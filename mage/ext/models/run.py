"""Measure the models the note names, stock and with this project's kernels swapped in, on a GPU, and
record the rows: ``python -m mage models --out data/h200``.

Per case, four columns: stock eager, swapped eager, stock under torch.compile, swapped under compile;
each in the harness's views (kernel time and launches from a profile, event spans in rotated rounds).
Beside them: each kind of work's share of the stock kernel time, and Amdahl's prediction for the swap,
built from the calls the swap replaces, timed one by one (stock and ours) at the shapes the model makes
them. Accuracy: each column's norm-wise error against the float64 model, the stock column's beside it.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import torch

from mage import data, env
from mage.cli_common import _command_line
from mage.profile import profile
from mage.session import new_run_id
from mage.timing import spans

from . import parts
from .parts import Case

# what a kernel's name says about its work; the first match wins, the rest is 'elementwise'
KINDS = (("attention", r"flash|fmha|attention|efficient_attention|sdpa"), ("layernorm", r"layer_?norm"),
         ("aggregation", r"scatter|index_add|indexfunc|segment|neighbor_agg|permuted_rows|edge_dot"),
         ("gemm", r"gemm|gemv|cutlass|nvjet|xmma|matmul|sm90_|sm80_"), ("gelu", r"gelu"), ("conv", r"conv"))
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}  # norm-wise against float64; the stock column's error is beside it


def kind_of(name: str) -> str:
    return next((k for k, pat in KINDS if re.search(pat, name, re.I)), "elementwise")


def _error(out, ref) -> float:
    out = out if isinstance(out, tuple) else (out,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    return max(float((o.double() - r).norm() / r.norm()) for o, r in zip(out, ref))


def measure(case: Case, iters: int, n_spans: int, log, save=lambda rows, checks: None) -> tuple[list, list]:
    """Check, profile and span each column of ``case``; ``save`` gets the rows and checks so far after each
    column (a run cut by a time limit keeps the columns it finished: a compiled model can take minutes to
    build)."""
    base = dict(op=case.op, dtype=case.dtype, shape=case.shape, shape_set="model", cache="warm", round=0)
    rows, checks, kernel, live, stock_kinds = [], [], {}, {}, Counter()
    ref = case.reference()
    for name, fn in case.columns.items():
        try:
            err = _error(fn(), ref)
        except Exception as e:  # noqa: BLE001 - a column that cannot run is a recorded failure, not a crash
            checks.append(dict(op=case.op, impl=name, dtype=case.dtype, shape=case.shape, dist="normal",
                               error=float("nan"), tolerance=TOLERANCE[case.dtype], passed=False, trials=1,
                               reason=f"{type(e).__name__}: {e}"[:300]))
            log(f"  {name}: failed to run ({type(e).__name__}: {e})")
            save(rows, checks)
            continue
        passed = err <= TOLERANCE[case.dtype]
        checks.append(dict(op=case.op, impl=name, dtype=case.dtype, shape=case.shape, dist="normal", error=err,
                           tolerance=TOLERANCE[case.dtype], passed=passed, trials=1, reason=""))
        if not passed:  # never time what fails its check
            log(f"  {name}: error {err:.3g} against float64 is over {TOLERANCE[case.dtype]:g}; not timed")
            save(rows, checks)
            continue
        p = profile(fn, iters=iters)
        kernel[name], live[name] = p, fn
        rows += [dict(base, impl=name, view="kernel_time", stat="mean", value=p.kernel_us, unit="us"),
                 dict(base, impl=name, view="launches", stat="mean", value=p.launches, unit="count")]
        kinds = Counter()
        for k, us in p.kernel_us_by_name.items():
            kinds[kind_of(k)] += us
        rows += [dict(base, impl=name, view="kernel_part", stat="mean", stage=k, value=us, unit="us")
                 for k, us in sorted(kinds.items())]
        if name == "stock":
            stock_kinds = kinds
        save(rows, checks)
    if not live:
        return rows, checks
    sr = spans(live, n=n_spans, rounds=3, warmup=3)
    for name in live:
        means = sr.round_means(name)
        rows.append(dict(base, impl=name, view="event_span", stat="mean", value=sum(means) / 3, unit="us"))
        rows += [dict(base, impl=name, view="event_span", stat="mean", round=i + 1, value=v, unit="us")
                 for i, v in enumerate(means)]
    if "stock" not in kernel:  # nothing to predict from: the failed check says why
        return rows, checks
    try:
        stock_us = sum(n * profile(s, iters=iters).kernel_us for s, _, n in case.replaced)
        ours_us = sum(n * profile(o, iters=iters).kernel_us for _, o, n in case.replaced)
    except Exception as e:  # noqa: BLE001 - the columns measured above are kept; the prediction is missing
        log(f"  Amdahl's prediction failed ({type(e).__name__}: {e}); the columns are recorded without it")
        return rows, checks
    replaced = stock_us + sum(stock_kinds.get(k, 0.0) for k in case.fused_kinds)
    predicted = kernel["stock"].kernel_us - replaced + ours_us
    rows += [dict(base, impl="swapped", view="kernel_time", stat="predicted", value=predicted, unit="us"),
             dict(base, impl="stock", view="kernel_part", stat="mean", stage="replaced_by_swap", value=replaced, unit="us"),
             dict(base, impl="swapped", view="kernel_part", stat="mean", stage="replacing", value=ours_us, unit="us")]
    log(f"{case.op} {case.shape} {case.dtype}: kernel us " + ", ".join(f"{k} {p.kernel_us:.0f}" for k, p in kernel.items())
        + f"; predicted swapped {predicted:.0f} (the swap reaches {replaced / kernel['stock'].kernel_us:.0%})")
    return rows, checks


def arguments(ap) -> None:
    """The options of ``python -m mage models``."""
    ap.add_argument("--out", required=True, help="the machine's data folder; rows go to <out>/models/")
    ap.add_argument("--models", nargs="+", default=["vjepa2", "schnet", "mace"], choices=["vjepa2", "schnet", "mace"])
    ap.add_argument("--frames", type=int, nargs="+", default=[16, 64], help="V-JEPA 2 clip lengths")
    # 30,000 atoms: about 1.6 M edges; the float64 reference's forces at 100,000 atoms would need over
    # 100 GB (six interactions' saved messages), so larger boxes are asked for by name
    ap.add_argument("--atoms", type=int, nargs="+", default=[3000, 30000], help="SchNet box sizes")
    # MACE-MP-0 medium's sizes at 6 A: about 90 neighbours an atom and 2,048 + 5,120 floats a message, so
    # 3,000 atoms carry about 7.6 GB of messages a forward (and the float64 reference twice that)
    ap.add_argument("--mace-atoms", type=int, nargs="+", default=[1000, 3000], help="MACE box sizes")
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--spans", type=int, default=30)
    ap.add_argument("--small", action="store_true", help="the small configurations (a smoke test)")


def run(a) -> int:
    if not torch.cuda.is_available():
        print("mage models: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32, the libraries' default on this road
    torch.backends.cudnn.allow_tf32 = False
    out = Path(a.out) / "models"
    e = env.environment(_command_line())  # as typed: no interpreter or checkout path in the data
    data.ensure_same_machine(a.out, e)
    run_id = data.add_new_run(out, new_run_id, e)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    cases = []
    if "vjepa2" in a.models:
        cases += [lambda f=f, d=d: parts.vjepa2_case(f, d, a.small) for f in a.frames for d in a.dtypes]
    if "schnet" in a.models:  # SchNet's published form is FP32
        cases += [lambda n=n: parts.schnet_case(n, a.small) for n in a.atoms]
    if "mace" in a.models:  # MACE simulates in FP32 (or FP64, which no kernel here has)
        cases += [lambda n=n: parts.mace_case(n, a.small) for n in a.mace_atoms]
    key = ["op", "impl", "dtype", "shape", "shape_set", "cache", "view", "round", "stat", "stage"]
    for make in cases:
        case = make()
        # what "swapped" means in this case (it follows the precision): kept with the run, never implied
        e.setdefault("swap", {})[f"{case.op} {case.dtype} {case.shape}"] = case.swap
        data.add_environment(out, run_id, e)
        def save(rows, checks):  # merged by key: saving again after the next column replaces, never doubles
            if rows:
                data.merge_csv(pd.DataFrame(rows).assign(run=run_id), out / "rows.csv", key)
            if checks:
                data.merge_csv(pd.DataFrame(checks).assign(run=run_id), out / "checks.csv",
                               ["op", "impl", "dtype", "shape"])
        save(*measure(case, a.iters, a.spans, log, save))
        torch.cuda.empty_cache()
    return 0


def main(argv=None) -> int:
    """The subcommand without the rest of the command line (the tests' entry)."""
    ap = argparse.ArgumentParser(prog="python -m mage models", description=__doc__.splitlines()[0])
    arguments(ap)
    return run(ap.parse_args(argv))
