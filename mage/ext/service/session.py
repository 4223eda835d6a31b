"""The service experiment's session: for every selected block, implementation, precision and host
memory, the closed loop, the batch sweep and the open loop at several loads of ``mage.ext.service.loops``, served
by ``mage.ext.service.gpu``'s executor, each case's rows written into ``FILE`` as soon as it is done."""
from __future__ import annotations

import time
from pathlib import Path

from mage import facets
from mage.ext.service import loops as sv
from mage.ext.service import stats as st
from mage.ops import shape_key

FILE = "service.csv"


def executor_factory(spec, impl, shape, items, host_mem, seed=0, pad=True, device="cuda"):
    """make(batch) -> a warmed executor, or ``MemoryLimit`` where the batch does not fit."""
    import torch

    from .gpu import CudaExecutor

    pool = []  # the requests' host inputs, made by the first executor and shared by the later ones

    def make(batch: int):
        try:
            ex = CudaExecutor(spec, impl, shape, items, batch, host_mem, pool=pool or 64, seed=seed, pad=pad,
                              device=device)
            pool[:] = ex.pool
            ex.warm()
            return ex
        except torch.cuda.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            raise sv.MemoryLimit(str(e)) from e
    return make


def measure(out_dir, op_names, impl_names=None, dtypes=None, shape_set="field", items=None,
            host_mems=("pinned", "pageable"), requests=2000, max_batch=16, wait_us=200.0,
            loads=(0.1, 0.3, 0.5, 0.7, 0.9), sweep_limit=1024, reps=20, seed=0, pad=True, command="",
            pin=True, force_machine=False, log=print, device="cuda"):
    """Closed loop, batch sweep and open loop for every selected case; rows into ``out_dir/FILE``.
    ``device='cpu'`` runs the same session on the host (tests; the events then read the host's clock)."""
    import pandas as pd

    from mage import registry
    from mage.data import IDENTITY, add_new_run, ensure_same_machine, merge_csv
    from mage.env import environment
    from mage.ops import OPS
    from mage.session import new_run_id, steady_process

    from .gpu import check_batching

    for name in ("requests", "max_batch", "sweep_limit", "reps"):
        sv.check_positive(name, locals()[name], whole=True)
    sv.check_positive("wait_us", wait_us, allow_zero=True)
    for load in loads:
        sv.check_positive("loads", load)
    specs = [OPS[o] for o in op_names]
    for spec in specs:
        check_batching(spec)
    out_dir = Path(out_dir)
    registry.load()
    env = environment(command)
    ensure_same_machine(out_dir, env, force=force_machine)
    env["process"] = steady_process(pin)
    env["protocol"] = dict(service=dict(requests=requests, max_batch=max_batch, wait_us=wait_us, loads=list(loads),
                                        sweep_limit=sweep_limit, sweep_reps=reps, seed=seed, padded_batches=pad,
                                        percentiles="nearest rank", peak="batch sweep, batches <= max_batch"))
    run = add_new_run(out_dir, new_run_id, env)
    clock, all_rows = sv.WallClock(), []
    for spec in specs:
        batching = facets.get(spec, "batch")
        n_items = items or batching.items
        requests_at = {}  # one request shape once (a size sweep differs only in the size a request fixes)
        for shape in spec.shapes[shape_set]:
            requests_at.setdefault(shape_key(dict(shape, **{batching.size: n_items})), shape)
        for key, shape in requests_at.items():
            request = dict(shape, **{batching.size: n_items})
            for im in registry.impls(spec.name, impl_names):
                if not im.callable or im.runs_on(device) or (dtypes and im.dtype not in dtypes):
                    continue
                for host_mem in host_mems:
                    t0 = time.perf_counter()
                    base = st.base_row(spec.name, im.name, im.dtype, shape_key(request), run, host_mem, im.family)
                    try:
                        rows = _case(spec, im, shape, n_items, host_mem, base, clock, requests, max_batch, wait_us,
                                     loads, sweep_limit, reps, seed, pad, log, device)
                    except Exception as e:  # noqa: BLE001 - one failing column must not lose the others
                        log(f"  {spec.name} {im.name}/{im.dtype} {host_mem}: FAILED {type(e).__name__}: {e}")
                        continue
                    merge_csv(pd.DataFrame(rows), out_dir / FILE, IDENTITY)
                    all_rows += rows
                    log(f"  {spec.name:>12} {im.name:>20}/{im.dtype:<5} {host_mem:<8} {shape_key(request)}"
                        f"  ({time.perf_counter() - t0:.0f} s)")
    return run, all_rows


def _case(spec, im, shape, items, host_mem, base, clock, requests, max_batch, wait_us, loads, sweep_limit, reps,
          seed, pad, log, device) -> list[dict]:
    t0 = time.perf_counter()
    step = lambda what: log(f"    {im.name}/{im.dtype} {host_mem}: {what} at {time.perf_counter() - t0:.0f} s")  # noqa: E731
    make = executor_factory(spec, im, shape, items, host_mem, seed=seed, pad=pad, device=device)
    size = items
    batching = facets.get(spec, "batch")
    items = batching.items_in(dict(shape, **{batching.size: size}))  # what throughput counts, per request
    one = make(1)
    one.verify(spec)
    step("ready and verified")  # progress lines: a run cut by its time limit shows which phase held it
    rows = st.trace_rows(sv.closed_loop(one, clock, requests), base, "closed", items, batch=1)
    del one
    step("closed loop done")
    sweep = sv.batch_sweep(make, clock, sweep_limit, reps=reps)
    rows += st.sweep_rows(sweep, base, items)
    step(f"batch sweep done (to {sweep[-1]['batch']})")
    if not sweep[-1]["fits"]:
        log(f"    memory limit: a batch of {sweep[-1]['batch']} requests does not fit")
    peak = st.peak_requests_per_s(sweep, max_batch)
    ex = make(max_batch)
    for k, load in enumerate(loads):
        rate = load * peak
        trace = sv.open_loop(ex, clock, sv.poisson_arrivals(rate, requests, seed + k), max_batch, wait_us)
        rows += st.trace_rows(trace, base, "open", items, batch=max_batch, wait_us=wait_us, load=load, rate=rate)
    return rows
