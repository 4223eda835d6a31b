"""What a measuring session sets up before it times anything: its settings and their protocol as
recorded, its run id, the process (pinned to one core, raised in priority where allowed), and the
environment and ceilings of the card, written first so that every row can be read against them. Also
the session's two small ends: the table it prints last, and the quick check-and-time of one call that
the book's live tile widget runs.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import time
from dataclasses import dataclass, field

import pandas as pd
import torch

from . import hooks, ops
from .ceilings import measure_all as measure_ceilings
from .check import check
from .data import add_environment, add_new_run, merge_csv
from .env import environment, machine_name
from .profile import profile
from .timing import spans, summarize


@dataclass
class Settings:
    iters: int = 100  # profiled calls
    spans: int = 300  # event spans per implementation, over all rounds
    rounds: int = 3
    block: int = 10  # passes per block; the rounds' blocks alternate over the window (timing.schedule)
    warmup: int = 10
    warm_s: float = 0.05  # and at least this long, each implementation, before the spans
    graph: bool = True
    seed: int = 1234
    run: str = ""
    ceilings: dict = field(default_factory=dict)
    l2_bytes: int = 60 * 2**20
    passes: tuple = ("forward",)  # mage.hooks.names(): forward and the passes extensions add


# The tile sweep's protocol: many configs, so fewer calls each; no CUDA graph, no timed warm-up.
TILE_SETTINGS = dict(iters=20, spans=60, rounds=3, block=10, warmup=3, warm_s=0.0, graph=False)


def _protocol(iters, spans, rounds, block, warmup, warm_s, graph, passes=("forward",), **_) -> dict:
    """How a run measured, as written to its environment."""
    return dict(profiled_calls=iters, spans=spans, rounds=rounds, passes_per_block=block,
                rounds_interleaved=True, warmup_calls=warmup, warmup_s=warm_s, cuda_graph=graph,
                passes=list(passes), **hooks.protocol())


def steady_process(pin: bool = True) -> dict:
    """Pin this process to one core and raise its priority where allowed, so that the host's side of
    the spans (Python, validation, the launch API) is not moved between cores or delayed by other work
    on a shared machine. Returns what was done, for the run's environment."""
    done = {"pinned_core": None, "nice": None, "priority_raised": False}
    if not pin:
        return done
    try:
        cores = sorted(os.sched_getaffinity(0))
        core = cores[len(cores) // 2]  # away from core 0, where interrupts tend to land
        os.sched_setaffinity(0, {core})
        done["pinned_core"] = core
        # One core: PyTorch's host thread pool (a thread a core by default) would share it, and its
        # threads' waits would stall every parallel host operation (building a request's graph, say).
        import torch
        torch.set_num_threads(1)
        done["host_threads"] = 1
    except (AttributeError, OSError) as e:
        done["pin_error"] = f"{type(e).__name__}: {e}"
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        done["priority_raised"] = True
    except (AttributeError, OSError) as e:  # not root: the priority stays as it was
        done["priority_error"] = f"{type(e).__name__}: {e}"
    try:
        done["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    except (AttributeError, OSError):
        pass
    return done


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + machine_name()


def prepare_run(out_dir, st: Settings, command: str, log=print, pin: bool = True, force_machine: bool = False):
    """Environment and ceilings for this run, written before any kernel is timed. A folder that holds
    another machine's record is refused unless ``force_machine``."""
    from .data import ensure_same_machine
    process = steady_process(pin)
    env = environment(command)
    from . import registry
    registry.load()
    if registry.LOAD_ERRORS:  # a kernel module that failed to import takes its columns out of the run
        env["load_errors"] = dict(registry.LOAD_ERRORS)
        for mod, err in registry.LOAD_ERRORS.items():
            log(f"  WARNING: {mod} did not import, so its implementations are not measured: {err}")
    ensure_same_machine(out_dir, env, force=force_machine)
    env["process"] = process
    env["protocol"] = dict(_protocol(**vars(st)), seed=st.seed, tile_sweep=_protocol(**TILE_SETTINGS))
    st.l2_bytes = env.get("l2_bytes") or st.l2_bytes
    if st.run:  # a run id the caller chose (tests): recorded as given
        add_environment(out_dir, st.run, env)
    else:
        st.run = add_new_run(out_dir, new_run_id, env)
    log(f"run {st.run} on {env.get('gpu')}: measuring ceilings")
    t0 = time.perf_counter()
    crow = [dict(r, run=st.run) for r in measure_ceilings()]
    log(f"  ceilings took {time.perf_counter() - t0:.1f} s")
    merge_csv(pd.DataFrame(crow), out_dir / "ceilings.csv", ["name", "run"])
    st.ceilings = {r["name"]: r["value"] for r in crow}
    for r in crow:
        log(f"  {r['name']:>16} {r['value']:10.2f} {r['unit']}")
    return env


def summary_table(rows: pd.DataFrame) -> str:
    """One line per (op, impl, dtype, shape, cache, pass): the three views and graph replay side by side."""
    if rows.empty:
        return "(no rows)"
    top = rows[(rows["round"] == 0) & (rows["stat"] == "mean")]
    idx = ["op", "shape_set", "shape", "impl", "dtype", "cache"] + (["pass"] if "pass" in top.columns else [])
    t = top.pivot_table(index=idx, columns="view", values="value", aggfunc="first")
    t = t[[c for c in ("kernel_time", "event_span", "graph_span", "launches") if c in t.columns]]
    if "frac_of_floor" in top.columns:
        t["floor/kernel"] = top[top["view"] == "kernel_time"].set_index(idx)["frac_of_floor"]
    return t.round(2).to_string()


def quick(impl, shape: dict, iters: int = 20, n_spans: int = 30):
    """Check and time one implementation at one shape (the book's live widget): a few seconds."""
    c = check(impl, shape, trials=1)
    result = {"error": c.error, "passed": c.passed, "reason": c.reason, "kernel_us": math.nan, "span_us": math.nan}
    if not c.passed or not torch.cuda.is_available():
        return result
    spec = ops.get(impl.op)
    inputs = spec.inputs(shape, seed=1, device="cuda", dtype=impl.dtype)
    args = impl.prepare(*inputs) if impl.prepare else inputs
    fn = lambda: impl.fn(*args)  # noqa: E731
    result["kernel_us"] = profile(fn, iters=iters).kernel_us
    result["span_us"] = summarize([x for r in spans({"x": fn}, n=n_spans, rounds=3).samples["x"] for x in r])["mean"]
    return result
