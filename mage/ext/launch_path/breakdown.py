"""Where a small call's host time goes: the launch path, stage by stage, per implementation.

An implementation may register a stage hook (``stages(op, name, dtype)``): given the inputs the harness
would pass, it returns ``[(stage, fn), ...]``, each ``fn`` one stage of its call run alone (its argument
checks, its config choice, its allocation, its launcher's argument binding, ...), and optionally
``[(stage, fn)]`` of whole alternative entries (the same call through a ``torch.library`` operator).
An implementation without a hook gets the generic breakdown: the whole call only. This module names no
operation and no implementation; the hooks come from the kernels' shared code.

Method: host wall time (``time.perf_counter``) of many back-to-back calls of each callable alone, in
batches between synchronisations (so the GPU queue never fills and the host never waits on it), the
per-call time of a batch being its total over its calls; a stage's value is the median over batches
(``stat='median'``) and the fastest batch (``stat='min'``). Each stage is timed ALONE, not as a
cumulative prefix of the call, so the parts need not add up exactly: the stage 'other (Python glue)'
is the whole call less the timed parts, and says how much of the call no stage names. A stage that is
a difference of two timed callables (the driver launch: a launch less its argument binding) is marked
``source='derived'``. The whole call is also timed the way the harness's ``host_time`` sees it: one
call right after a synchronisation, the GPU idle ('whole call, after sync').

Rows: view 'host_stage' (microseconds per call), the stage in the column ``stage``, cache 'n/a',
with the run id and its environment like every other measurement, in ``<out>/launch_path.csv``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

from mage import registry

WHOLE = "whole call"
AFTER_SYNC = "whole call, after sync"
OTHER = "other (Python glue)"
VIEW = "host_stage"
FILE = "launch_path.csv"
KEY = ["op", "impl", "dtype", "shape", "cache", "view", "round", "stat", "run", "stage"]

# In the core's 'stages' table (``mage.registry.declare``), (op, impl name, dtype) -> hook(impl, inputs)
# -> {"stages": [(name, fn)], "nested": {names timed within
# another stage}, "entries": [(name, fn)], "derived": [(name, outer, inner)]}: the parts of one call, each
# run alone; the stages of ``nested`` lie inside another stage (left out of the sum that gives OTHER);
# ``entries`` are whole calls through another door (an operator); ``derived`` = outer less inner.
TABLE = "stages"


def stages(op: str, name: str, dtype: str = "fp32"):
    """Decorator: register the stage hook of one implementation (see the module docstring); kernel
    packages write the same entry with ``registry.declare("stages", ...)``."""
    return registry.declare(TABLE, op, name, dtype)


def hook_of(impl) -> Optional[Callable]:
    e = registry.declared(TABLE).get(impl.key)
    return e["fn"] if e else None


def _sync(device: str) -> Callable[[], None]:
    import torch
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def per_call_us(fn: Callable, sync: Callable, calls: int = 50, batches: int = 15, warmup: int = 5) -> dict:
    """{'median', 'min'} over batches of one batch's per-call host time, in microseconds."""
    for _ in range(warmup):
        fn()
    sync()
    means = []
    clock = time.perf_counter
    for _ in range(batches):
        t0 = clock()
        for _ in range(calls):
            fn()
        means.append((clock() - t0) / calls * 1e6)
        sync()  # outside the timed span: the next batch starts on an empty queue
    return {"median": statistics.median(means), "min": min(means)}


def after_sync_us(fn: Callable, sync: Callable, calls: int = 200) -> dict:
    """Host time of one call started right after a synchronisation (the harness's ``host_time``)."""
    xs = []
    clock = time.perf_counter
    for _ in range(calls):
        sync()
        t0 = clock()
        fn()
        xs.append((clock() - t0) * 1e6)
    sync()
    return {"median": statistics.median(xs), "min": min(xs)}


def breakdown(impl, shape: dict, device: str = "cuda", calls: int = 50, batches: int = 15) -> list[dict]:
    """The stage rows of one implementation at one shape: ``{stage, stat, value, source}`` dicts."""
    from mage.ops import OPS
    spec = OPS[impl.op]
    inputs = spec.inputs(shape, seed=0, device=device, dtype=impl.dtype)
    if impl.prepare:
        inputs = impl.prepare(*inputs)
    sync = _sync(device)

    def whole():
        return impl.fn(*inputs)

    rows = []

    def add(stage, stats, source="measured"):
        rows.extend(dict(stage=stage, stat=k, value=float(v), source=source) for k, v in stats.items())
        return stats

    total = add(WHOLE, per_call_us(whole, sync, calls, batches))
    add(AFTER_SYNC, after_sync_us(whole, sync, calls=max(calls, 4 * batches)))
    hook = hook_of(impl)
    if hook is None:  # the generic breakdown: the call as one stage
        return rows
    parts = hook(impl, inputs)
    timed = {WHOLE: total}
    for stage, fn in parts.get("stages", []):
        timed[stage] = add(stage, per_call_us(fn, sync, calls, batches))
    top = [s for s, _ in parts.get("stages", []) if s not in parts.get("nested", ())]
    add(OTHER, {"median": total["median"] - sum(timed[s]["median"] for s in top)}, "derived")
    for stage, fn in parts.get("entries", []):
        timed[stage] = add(stage, per_call_us(fn, sync, calls, batches))
    for stage, outer, inner in parts.get("derived", []):  # outer's time less inner's: a stage within outer
        if outer in timed and inner in timed:
            add(stage, {"median": timed[outer]["median"] - timed[inner]["median"]}, "derived")
    return rows


def rows_for(impl, shape: dict, shape_set: str, run: str, device: str = "cuda", **kw) -> list[dict]:
    """The tidy rows (the measurement schema plus ``stage``) of one implementation at one shape."""
    from mage.ops import shape_key
    base = dict(op=impl.op, impl=impl.name, dtype=impl.dtype, shape=shape_key(shape), shape_set=shape_set,
                cache="n/a", view=VIEW, round=0, unit="us", family=impl.family, run=run)
    return [dict(base, **r) for r in breakdown(impl, shape, device, **kw)]


def measure(out_dir, op_names=None, impl_names=None, shape_set: str = "field", command: str = "",
            calls: int = 50, batches: int = 15, log=print, pin: bool = True, force_machine: bool = False):
    """Measure every selected implementation at the shape set's shapes; rows into ``out_dir/FILE``."""
    from pathlib import Path

    import pandas as pd

    from mage.data import add_new_run, ensure_same_machine, merge_csv
    from mage.env import environment
    from mage.ops import OPS, shape_key
    from mage.session import new_run_id, steady_process

    out_dir = Path(out_dir)
    registry.load()
    env = environment(command)
    ensure_same_machine(out_dir, env, force=force_machine)
    env["process"] = steady_process(pin)
    env["protocol"] = dict(launch_path=dict(calls_per_batch=calls, batches=batches, method="each stage alone"))
    run = add_new_run(out_dir, new_run_id, env)
    rows = []
    for op in op_names or list(OPS):
        for shape in OPS[op].shapes[shape_set]:
            for im in registry.impls(op, impl_names):
                if not im.callable or im.runs_on("cuda"):
                    continue
                t0 = time.perf_counter()
                try:
                    got = rows_for(im, shape, shape_set, run, calls=calls, batches=batches)
                except Exception as e:  # noqa: BLE001 - one failing column must not lose the others
                    log(f"  {op} {im.name}/{im.dtype} {shape_key(shape)}: FAILED {type(e).__name__}: {e}")
                    continue
                rows += got
                log(f"  {op:>12} {im.name:>14}/{im.dtype:<6} {shape_key(shape)}  {_line(got)}"
                    f"  ({time.perf_counter() - t0:.1f} s)")
    if rows:
        merge_csv(pd.DataFrame(rows), out_dir / FILE, KEY)
    return run, rows


def _line(rows: list[dict]) -> str:
    med = {r["stage"]: r["value"] for r in rows if r["stat"] == "median"}
    return "  ".join(f"{k}={v:.1f}" for k, v in med.items())


def summary(rows: list[dict], baseline: str | None = None) -> str:
    """Per case: the whole call's host time (back to back, median) against ``baseline``'s (default: the
    registry's) at that shape, the ratio the launch-path target reads."""
    baseline = baseline or registry.role("baseline")
    whole = {(r["op"], r["shape"], r["impl"], r["dtype"]): r["value"] for r in rows
             if r["stage"] == WHOLE and r["stat"] == "median"}
    lines = [f"{'op':>12} {'impl':>14} {'dtype':>6} {'host us':>9} {'/ ' + baseline:>12}"]
    for (op, shape, impl, dtype), v in whole.items():
        base = whole.get((op, shape, baseline, "fp32"))
        ratio = f"{v / base:12.2f}" if base else f"{'':>12}"
        lines.append(f"{op:>12} {impl:>14} {dtype:>6} {v:9.1f} {ratio}")
    return "\n".join(lines)
