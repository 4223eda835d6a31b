"""The training-step session: every selected (block, shape, precision), the columns with a training path
(``paths.train_fn``) checked, warmed, profiled and spanned taking turns, rows into ``train.csv``
beside the measurements. What one step is (its weights, activations and items, the optimizer, the whole
step as one CUDA graph) is ``mage.ext.training.train``'s ``Step``; the protocol is the module docstring there."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from mage import ops, registry
from mage.errors import MageInputError
from mage.ext.training import passes, paths

from .train import LR, PRECISIONS, WEIGHT_DECAY, Step, _sync

FILE = "train.csv"


def _config(precision, shape_set="") -> str:
    """What a step ran with, recorded with every row (and the spec's shape set the shape came from)."""
    c = {"optimizer": "AdamW(fused)", "lr": LR, "weight_decay": WEIGHT_DECAY, "master": "fp32",
         "compute": "autocast bf16" if precision == "bf16" else "fp32"}
    return json.dumps(dict(c, shapes=shape_set) if shape_set else c, sort_keys=True)


def measure(out_dir, op_names, impl_names=None, shape_sets=("field",), precisions=PRECISIONS, steps=60, iters=20,
            seed=0, command="", pin=True, force_machine=False, log=None):
    """Every selected (block, shape, precision): the columns' steps take turns; rows into ``out_dir/FILE``."""
    import pandas as pd

    from mage.data import IDENTITY, add_new_run, ensure_same_machine, merge_csv
    from mage.env import clock_warnings, clocks, environment
    from mage.measure import stderr_log
    from mage.profile import profile
    from mage.session import new_run_id, steady_process
    from mage.timing import SpanPlan, spans

    log = log or stderr_log
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise MageInputError("train", "--precisions", f"must be among {list(PRECISIONS)}, got {bad}")
    out_dir = Path(out_dir)
    registry.load()
    env = environment(command)
    ensure_same_machine(out_dir, env, force=force_machine)
    env["process"] = steady_process(pin)
    plan = SpanPlan.make(steps, 3, 5, warmup=3, warm_s=0.05)
    env["protocol"] = dict(train=dict(steps=steps, profiled_steps=iters, seed=seed, optimizer=_config("fp32"),
                                      span_plan=json.loads(plan.to_json())))
    run = add_new_run(out_dir, new_run_id, env)
    all_rows = []
    for name in op_names:
        spec = ops.get(name)
        for shape_set in shape_sets:
            for shape in spec.shapes[shape_set]:
                for precision in precisions:
                    rows = _case(spec, shape, shape_set, precision, impl_names, plan, iters, seed, run, log,
                                 profile, spans, clocks, clock_warnings)
                    if rows:
                        merge_csv(pd.DataFrame(rows), out_dir / FILE, IDENTITY)
                    all_rows += rows
                    torch.cuda.empty_cache()
    return run, all_rows


def _case(spec, shape, shape_set, precision, impl_names, plan, iters, seed, run, log, profile, spans, clocks,
          clock_warnings, device="cuda"):
    """The rows of one (block, shape, precision): every column with a training path, checked, warmed, then
    profiled and spanned, the columns taking turns. The GPU's tools come as arguments (tests fake them)."""
    from mage.timing import summarize
    key = ops.shape_key(shape)
    steps = {}
    # the FP32 columns are the training paths; bf16 mixed precision runs them under autocast
    for im in registry.impls(spec.name, names=impl_names, dtype="fp32"):
        fn = paths.train_fn(im)
        if fn is None or im.runs_on(device):
            log(f"  {spec.name} {im.name} {key}: " + ("no training path" if fn is None else im.runs_on(device)))
            continue
        if precision == "bf16" and not paths.follows_autocast(im):  # it would compute FP32 under a bf16 label
            log(f"  {spec.name} {im.name} {key}: its training path does not follow autocast: no bf16 row")
            continue
        # the path's FP32 gradients checked first (for either precision: autocast runs the same path),
        # as a forward is checked before it is timed
        c = passes.grad_check(im, fn, shape, seed=seed + 29, device=device)
        if not c.passed:
            log(f"  refusing to train {spec.name} {im.name} {key}: {c.reason}")
            continue
        t0 = time.perf_counter()
        try:
            step = Step(spec, im, fn, shape, precision, seed=seed, device=device,
                        graphed=paths.step_graphed(im))
            why = step.verify()
            for _ in range(2):  # compilation (torch.compile's backward, CUDA graph recording) lands here
                step()
            _sync(device)
        except Exception as e:  # noqa: BLE001 - one column failing must not lose the others
            log(f"  {spec.name} {im.name} {precision} {key}: cannot train: {type(e).__name__}: {e}")
            continue
        if why:
            log(f"  refusing to time {spec.name} {im.name} {precision} {key}: {why}")
            continue
        log(f"  {spec.name} {im.name} {precision} {key}: ready in {time.perf_counter() - t0:.1f} s")
        steps[im.name] = im, step  # keyed by name: an Impl holds dicts and does not hash
    if not steps:
        return []
    # shape set 'train': a step's rows never stand among the calls' rows of the field and large sets
    base = dict(op=spec.name, dtype=precision, shape=key, shape_set="train", cache="warm", run=run,
                source="measured", config=_config(precision, shape_set), **{"pass": "step"})
    rows = []
    for im, step in steps.values():
        p = profile(step, iters=iters)
        r = dict(base, impl=im.name, family=im.family, round=0, stat="mean", kernel_names="|".join(p.kernel_names),
                 flags=";".join(p.flags))
        rows += [dict(r, view="kernel_time", value=p.kernel_us, unit="us"),
                 dict(r, view="launches", value=p.launches, unit="count")]
    readings = []
    for _, step in steps.values():
        step.record = True
    sp = spans({n: step for n, (_, step) in steps.items()}, plan=plan, between=lambda r: readings.append(clocks()))
    flags = ";".join(clock_warnings(readings))
    for im, step in steps.values():
        step.record = False
        r = dict(base, impl=im.name, family=im.family, round=0)
        whole = summarize([x for rnd in sp.samples[im.name] for x in rnd])
        for rnd, samples in enumerate(sp.samples[im.name], start=1):
            rows.append(dict(r, view="train_step", round=rnd, stat="mean", value=statistics.fmean(samples), unit="us"))
        for stat in ("n", "mean", "median", "p10", "p90", "min", "max"):
            rows.append(dict(r, view="train_step", stat=stat, value=whole[stat], unit="us", flags=flags))
        rows.append(dict(r, view="throughput", stat="mean", value=step.items / (whole["mean"] * 1e-6), unit="items/s",
                         stage=f"items per step: {step.items}"))
        host = [h for rnd in sp.host.get(im.name, []) for h in rnd]
        if host:
            rows.append(dict(r, view="host_time", stat="mean", value=statistics.fmean(host), unit="us"))
        for part, us in step.part_times().items():
            rows.append(dict(r, view="train_part", stat="mean", value=us, unit="us", stage=part))
    return rows


def summary(rows) -> str:
    """One line per (block, shape, precision, implementation): step time, items per second, the parts."""
    import pandas as pd
    df = pd.DataFrame(rows)
    if df.empty:
        return "(no rows)"
    top = df[(df["round"] == 0) & (df["stat"] == "mean")].copy()
    stage = top["stage"].fillna("") if "stage" in top.columns else ""
    top["col"] = top["view"].where(top["view"] != "train_part", "part:" + stage)
    t = top.pivot_table(index=["op", "shape", "dtype", "impl"], columns="col", values="value", aggfunc="first")
    return t.to_string(float_format=lambda v: f"{v:.4g}")
