"""The measurement: for each case, check every implementation, then take the three views (and graph
replay) side by side, and write tidy rows with the floors and flags derived from this run's ceilings.
"""
from __future__ import annotations

import json
import math
import sys
import time

import pandas as pd
import torch

from . import hooks, ops, registry
from .case_rows import _row_maker
from .check import check
from .data import merge_csv
from .env import clock_warnings, clocks
from .profile import ProfileError, profile
from .session import (TILE_SETTINGS, Settings, new_run_id, prepare_run, quick,  # noqa: F401 - the loop's API
                      steady_process, summary_table)
from .span_rows import _span_rows, own_rows  # noqa: F401 - _span_rows: the tests' entry too
from .timing import SpanPlan, spans

# One value of one run: a later run adds its rows beside the earlier runs' (mage.data.load picks a run)
KEY = ["op", "impl", "dtype", "shape", "cache", "pass", "view", "round", "stat", "run"]
COLD_FACTOR = 2.5  # input sets cover this many L2 sizes, so each call finds its inputs evicted
COLD_MAX_SETS, COLD_MAX_BYTES = 64, 8 * 2**30


nbytes = ops.input_bytes


def n_sets(cache: str, size: int, l2_bytes: int) -> int:
    """How many input sets to rotate among: one when warm; enough to overflow L2 when cold."""
    if cache == "warm" or size == 0:
        return 1
    k = math.ceil(COLD_FACTOR * l2_bytes / size)
    return max(1, min(k, COLD_MAX_SETS, COLD_MAX_BYTES // size))


def _cycling(fn, arg_sets, state=None):
    """A zero-argument call that walks through the input sets, one per call. Implementations that take
    turns share ``state``, so consecutive calls, whoever makes them, read different sets (a call never
    finds the set the previous call just brought into L2)."""
    if len(arg_sets) == 1:
        args = arg_sets[0]
        return lambda: fn(*args)
    state = {"i": 0} if state is None else state

    def call():
        i = state["i"]
        state["i"] = (i + 1) % len(arg_sets)
        return fn(*arg_sets[i])

    return call


def measure_case(spec, shape, shape_set, cache, impls, st: Settings, log=print):
    """Rows and check rows for one (op, shape, dtype group, cache), for each pass of ``st.passes``.
    Implementations that fail the check are recorded as failing and not timed; for any other pass, only
    those its extension's hook admits (``mage.hooks``)."""
    rows, checks = [], []
    dtype = impls[0].dtype
    key = ops.shape_key(shape)
    own = [im for im in impls if im.own_spans]  # they time themselves, in their own process
    impls = [im for im in impls if im.callable]
    good = []
    for im in impls:
        c = check(im, shape, trials=1, seed=st.seed + 17, device="cuda")
        checks.append({**c.row(), "run": st.run})
        if c.passed:
            good.append(im)
        else:
            log(f"  refusing to time {im.name} {key}: {c.reason}")
    admitted = {h: [im for im in good if h.admit(im, shape, st, log, checks)] for h in hooks.hooks(st.passes)}
    # Those that time themselves make one input set in their own process (warm only), and launch the
    # kernels of ``kernels_of``: timed only when that implementation passed its check.
    own_ok = []
    for im in own if cache == "warm" and "forward" in st.passes else []:
        if im.kernels_of in {i.name for i in impls}:
            passed = im.kernels_of in {i.name for i in good}
        else:
            c = check(registry.get(spec.name, im.kernels_of, dtype), shape, trials=1, seed=st.seed + 17, device="cuda")
            checks.append({**c.row(), "run": st.run})
            passed = c.passed
        if passed:
            own_ok.append(im)
        else:
            log(f"  refusing to time {im.name} {key}: {im.kernels_of}, whose kernels it launches, failed its check")
    if not good and not own_ok:
        return rows, checks
    probe = spec.inputs(shape, seed=st.seed, device="cuda", dtype=dtype)
    k = n_sets(cache, nbytes(probe), st.l2_bytes)
    sets = [probe] + [spec.another_set(shape, probe, st.seed + i, dtype) for i in range(1, k)]
    base = dict(op=spec.name, dtype=dtype, shape=key, shape_set=shape_set, cache=cache, run=st.run,
                source="measured")
    prepared = {}  # name -> (the prepared input sets, seconds it took), shared by every pass
    for im in good:
        t0 = time.perf_counter()
        arg_sets = [im.prepare(*s) if im.prepare else s for s in sets]
        torch.cuda.synchronize()
        prepared[im.name] = arg_sets, time.perf_counter() - t0

    for pass_ in st.passes:
        timed = good if pass_ == hooks.FORWARD else admitted[hooks.hook(pass_)]
        row = _row_maker(base, shape, pass_, hooks.cost(spec, shape, dtype, probe, pass_), st.ceilings)
        got, kernel = _time_pass(spec, key, pass_, timed, prepared, st, row, log)
        rows += got
        if pass_ == "forward":
            rows += own_rows(own_ok, probe, shape, shape_set, st, row, log, spec, key, kernel)
    return rows, checks


def _time_pass(spec, key, pass_, timed, prepared, st, row, log):
    """Profile, graph replay and the spans of one pass, the implementations taking turns."""
    rows, calls, kernel = [], {}, {}
    turn = {"i": 0}  # the input set the next call reads, shared by all implementations of this case
    for im in timed:
        arg_sets, prep = prepared[im.name]
        if pass_ == "forward":
            calls[im.name] = _cycling(im.fn, arg_sets, turn)
            one_set = [_cycling(im.fn, [a]) for a in arg_sets]
            rows.append(row(im, "prepare_time", prep, "s", prepare_s=prep))
        else:
            try:
                one_set = hooks.hook(pass_).calls(im, arg_sets, pass_, st.seed)
            except Exception as e:  # noqa: BLE001 - the check passed, so say why this set could not run
                log(f"  {pass_} of {im.name} {key} could not start: {type(e).__name__}: {e}")
                continue
            calls[im.name] = hooks.cycling(one_set)
        try:
            p = profile(calls[im.name], iters=st.iters)
        except ProfileError as e:
            raise ProfileError(f"{spec.name} {im.name} {key} {pass_}: {e}") from e
        except Exception as e:  # a training path that checks but cannot run repeatedly: say so, time the others
            if pass_ == "forward":
                raise
            log(f"  {pass_} of {im.name} {key} failed while profiled: {type(e).__name__}: {e}")
            del calls[im.name]
            continue
        kernel[im.name] = p
        names = "|".join(p.kernel_names)
        flags = list(p.flags)
        if st.graph:
            try:
                # about 2 ms of work per replay: enough to average, not so much that slow kernels dominate
                repeat = max(1, min(10, int(2000 / max(p.kernel_us, 1.0))))
                g = hooks.graph_us(one_set, im, arg_sets, pass_, st.seed, p.kernel_us, repeat)
                rows.append(row(im, "graph_span", g, "us"))
            except Exception as e:  # noqa: BLE001 - not every call can be captured; say so, keep going
                log(f"  graph capture failed for {im.name} {key} {pass_}: {type(e).__name__}: {e}")
                flags.append(f"no_graph:{type(e).__name__}")  # recorded beside the kernel time: why no replay
                torch.cuda.synchronize()
        rows.append(row(im, "kernel_time", p.kernel_us, "us", kernel_names=names, flags=";".join(flags)))
        rows.append(row(im, "launches", p.launches, "count", kernel_names=names, flags=";".join(p.flags)))
        if p.copy_us:
            rows.append(row(im, "copy_time", p.copy_us, "us", kernel_names=names))
    if calls:
        readings = []
        plan = SpanPlan.make(st.spans, st.rounds, st.block, st.warmup, st.warm_s)
        sp = spans(calls, plan=plan, between=lambda r: readings.append(clocks()))
        round_flags = clock_warnings(readings)
        for im in [i for i in timed if i.name in calls]:
            window = lambda r: [readings[a] for a in sp.round_window(r)]  # noqa: E731 - clocks before and after
            rows += _span_rows(im, sp, kernel[im.name], round_flags, window, row)
    return rows, kernel


def selected(shape: dict, where=None) -> bool:
    """``where`` ({key: value}, compared as text) holds for ``shape``; no ``where`` selects every shape."""
    return not where or all(str(shape.get(k)) == v for k, v in where.items())


def plan(op_names, impl_names, shape_sets, caches, dtypes=None, log=None, where=None):
    """The cases to run: (op, shape, shape_set, cache, [impls of one dtype]). ``log`` hears every
    implementation left out of a shape past its ``max_flops``. ``where`` ({key: value}) keeps the shapes
    whose every named key has that value (compared as text: ``dist=skewed``), to measure one case again
    without its neighbours; a key no shape of an operation has selects none of its shapes."""
    cases = []
    for name in op_names:
        spec = ops.get(name)
        chosen = [i for i in registry.impls(name, names=impl_names) if (dtypes is None or i.dtype in dtypes)]
        chosen = [i for i in chosen if not i.runs_on("cuda")]
        for shape_set in shape_sets:
            # The size sweep shows how cost grows with work: warm only, and without the implementations
            # that opt out (torch.compile would compile every size anew, seconds each, to show the same
            # kernels as at field and large) or time themselves in a process of their own.
            sweep = shape_set == "sweep"
            for shape in spec.shapes.get(shape_set, ()):  # a set of one operation's own (its contest's)
                if not selected(shape, where):
                    continue
                set_caches = ["warm"] if sweep else caches
                for cache in set_caches:
                    for dt in dict.fromkeys(i.dtype for i in chosen):
                        group = [i for i in chosen if i.dtype == dt and not (sweep and (not i.size_sweep or i.own_spans))]
                        past = [i for i in group if spec.flops(shape) > i.max_flops]
                        if past and log and cache == set_caches[0]:  # said once a shape, not once a cache
                            log(f"left out at {ops.shape_key(shape)} (past their max_flops): "
                                f"{', '.join(f'{i.name}/{i.dtype}' for i in past)}")
                        limited = [i for i in group if i.outside_limits(shape)]
                        if limited and log and cache == set_caches[0]:
                            log(f"left out at {ops.shape_key(shape)} (outside their stated limits): "
                                + "; ".join(f"{i.name}/{i.dtype}: {i.outside_limits(shape)}" for i in limited))
                        group = [i for i in group if i not in past and i not in limited]
                        if group:
                            cases.append((spec, shape, shape_set, cache, group))
    return cases


def _streams_anyway(spec, shape, dtype, st) -> bool:
    _, nb = spec.cost(shape, dtype)
    return n_sets("cold", nb, st.l2_bytes) == 1


def run_cases(cases, out_dir, st: Settings, log=print):
    all_rows, all_checks = [], []
    last_warm = {}
    for h in hooks.hooks(st.passes):
        h.start(st.passes)
    t_start = time.perf_counter()
    for n, (spec, shape, shape_set, cache, group) in enumerate(cases, 1):
        elapsed = time.perf_counter() - t_start
        log(f"[{n:3d}/{len(cases)} {elapsed:6.1f}s] {spec.name} {ops.shape_key(shape)} {group[0].dtype} {cache}: "
            + ", ".join(i.name for i in group))
        if cache == "cold" and shape_set != "sweep" and _streams_anyway(spec, shape, group[0].dtype, st):
            # One input set already overflows L2, so the warm case read everything from HBM: it is the
            # cold measurement too. Its rows are relabelled, with a flag saying so, not measured twice.
            rows = [dict(r, cache="cold", flags=";".join(filter(None, [r.get("flags", ""), "same_run_as_warm"])))
                    for r in last_warm.get((spec.name, ops.shape_key(shape), group[0].dtype), [])]
            checks = []
        else:
            rows, checks = measure_case(spec, shape, shape_set, cache, group, st, log=log)
        if cache == "warm":
            own = {i.name for i in group if i.own_spans}  # warm only: not relabelled as cold
            last_warm[(spec.name, ops.shape_key(shape), group[0].dtype)] = [r for r in rows if r["impl"] not in own]
        all_checks += checks
        # written after every case, atomically: a run cut short keeps what it measured
        write(out_dir, pd.DataFrame(rows), pd.DataFrame(checks))
        all_rows += rows
        torch.cuda.empty_cache()
    return pd.DataFrame(all_rows), pd.DataFrame(all_checks)


def write(out_dir, rows: pd.DataFrame, checks: pd.DataFrame):
    if rows.empty and checks.empty:
        return
    if len(rows) and "pass" not in rows.columns:  # rows made before the pass dimension measured forward calls
        rows = rows.assign(**{"pass": "forward"})
    # The checks first: a run stopped between the two writes must leave a check without its times, never
    # times without the check that allowed them.
    if len(checks):
        merge_csv(checks, out_dir / "checks.csv", ["op", "impl", "dtype", "shape", "dist", "run"])
    for shape_set, part in (rows.groupby("shape_set") if len(rows) else []):
        merge_csv(part, out_dir / f"{shape_set}.csv", KEY)


def measure_tiles(op_names, shape_sets, out_dir, st: Settings, log=print, dtypes=None, names=None, where=None):
    """The tile sweep: every configuration that an implementation offers (``Impl.sweep``), each checked,
    then profiled and spanned with the lighter TILE_SETTINGS; every row records the config that ran.
    ``dtypes`` (default fp32 only, the book's sweeps) and ``names`` pick the implementations swept;
    ``where`` the shapes, as in ``plan``."""
    rows, checks = [], []
    for name in op_names:
        spec = ops.get(name)
        for base in [i for i in registry.impls(name, names=names) if i.sweep and i.variant
                     and i.dtype in (dtypes or ("fp32",))]:
            variants = [base.variant(**cfg) for cfg in base.sweep]
            for shape_set in shape_sets:
                for shape in [s for s in spec.shapes[shape_set] if selected(s, where)]:
                    for i, v in enumerate(variants):
                        log(f"  tiles {name} {ops.shape_key(shape)} [{i + 1}/{len(variants)}] {v.config}")
                        r, c = measure_case(spec, shape, shape_set, "warm", [v], Settings(
                            **TILE_SETTINGS, seed=st.seed, run=st.run, ceilings=st.ceilings, l2_bytes=st.l2_bytes),
                            log=log)
                        for x in r:
                            x["tile_of"], x["shape_set"] = shape_set, "tiles"
                        for x in c:  # a config that fails its check is refused, and its row says why
                            x["config"] = json.dumps(v.config, sort_keys=True)
                        rows += r
                        checks += c
                        # after every config: a run cut short keeps the configs it measured
                        if r:
                            merge_csv(pd.DataFrame(r), out_dir / "tiles.csv", KEY + ["config"])
                        if c:
                            merge_csv(pd.DataFrame(c), out_dir / "tile_checks.csv",
                                      ["op", "impl", "dtype", "shape", "dist", "config"])
    return pd.DataFrame(rows), pd.DataFrame(checks)


def stderr_log(msg):
    print(msg, file=sys.stderr, flush=True)
