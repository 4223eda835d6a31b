"""Command line: ``python -m mage measure|check|ceilings|serve|targets|import-published|machine-name``.

Bad input (an unknown implementation, a missing data folder, a folder of another machine) ends in one
line on stderr and exit status 2, like argparse's own errors; a failed check exits with 1.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import shlex
import sys
import time
from pathlib import Path

from . import ops, registry
from .data import DataError
from .errors import MageInputError


def _cuda_or_exit(what: str):
    import torch
    if not torch.cuda.is_available():
        sys.exit(f"mage {what}: no CUDA device here. Measuring needs a GPU; `python -m mage check` runs the "
                 "correctness checks that work on the CPU.")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return n


def _known_impls(cmd: str, names):
    """Refuse implementation names that nothing registers (a typo would otherwise select nothing)."""
    if names is None:
        return
    known = registry.impl_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        why = "".join(f"; {mod} could not load: {err}" for mod, err in registry.LOAD_ERRORS.items())
        raise MageInputError(cmd, "--impls", f"names no implementation {unknown}; known: {known}{why}")


def _same_machine(out, force: bool):
    from .data import ensure_same_machine
    from .env import environment
    ensure_same_machine(out, environment(), force=force)


def _command_line() -> str:
    """The command as a user would retype it (no machine-specific interpreter path)."""
    return "python -m mage " + " ".join(map(shlex.quote, sys.argv[1:]))


def cmd_measure(a):
    _cuda_or_exit("measure")
    from . import measure as m
    _known_impls("measure", a.impls)
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    from .passes import check_passes
    st = m.Settings(iters=a.iters, spans=a.spans, rounds=a.rounds, graph=not a.no_graph,
                    passes=check_passes(a.passes))
    t0 = time.perf_counter()
    m.prepare_run(out, st, _command_line(), log=m.stderr_log, pin=not a.no_pin, force_machine=a.force_machine)
    all_rows = []
    if not a.tiles_only:
        cases = m.plan(a.ops, a.impls, a.shapes, a.cache, a.dtypes)
        rows, checks = m.run_cases(cases, out, st, log=m.stderr_log)
        all_rows.append(rows)
        failed = checks[~checks["passed"]] if len(checks) else checks
        if len(failed):
            print(f"{len(failed)} implementation(s) failed their check and were not timed:")
            print(failed[["op", "impl", "dtype", "shape", "reason"]].to_string(index=False))
    if a.tiles or a.tiles_only:
        m.measure_tiles(a.ops, [s for s in a.shapes if s in ("field", "large")], out, st, log=m.stderr_log,
                        dtypes=a.dtypes, names=a.impls)
    print(m.summary_table(all_rows[0]) if all_rows else "")
    print(f"\nwrote {out}/ (run {st.run}) in {time.perf_counter() - t0:.0f} s")


def cmd_train(a):
    from . import train
    blocks = [n for n, s in ops.OPS.items() if s.kind == "block"]
    names = a.ops or blocks
    bad = [n for n in names if n not in blocks]
    if bad or not names:
        raise MageInputError("train", "--ops", f"must name model blocks {blocks}, got {bad or names}")
    _known_impls("train", a.impls)
    _cuda_or_exit("train")
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = train.measure(out, names, a.impls, a.shapes, a.precisions, steps=a.steps, iters=a.iters,
                              command=_command_line(), pin=not a.no_pin, force_machine=a.force_machine)
    print(train.summary(rows))
    print(f"run {run}: {len(rows)} rows in {out / train.FILE}")


def cmd_check(a):
    import torch
    from .check import check_all
    _known_impls("check", a.impls)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = [i for i in registry.impls(names=a.impls) if i.op in a.ops and i.callable]
    impls = [i for i in chosen if not i.runs_on(device)]
    if not impls:  # checking nothing must not read as a pass
        why = "; ".join(f"{i.op}/{i.name}/{i.dtype}: {i.runs_on(device)}" for i in chosen) or "none selected"
        raise MageInputError("check", "--impls", f"selects nothing that runs on {device} ({why})")
    if a.out:
        _same_machine(Path(a.out), a.force_machine)  # before anything runs: refuse early
    df = check_all(impls, trials=a.trials, dists=("normal", "heavy"), device=device)
    if a.out:
        from . import env
        from .data import add_environment, merge_csv
        # a run of its own, time-stamped like a measurement's, so `load_checks` orders it among them and
        # the folder records which machine made these rows
        run = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{env.machine_name()}-check"
        add_environment(Path(a.out), run, env.environment(_command_line()))
        merge_csv(df.assign(run=run), Path(a.out) / "checks.csv", ["op", "impl", "dtype", "shape", "dist", "run"])
    cols = ["op", "impl", "dtype", "shape", "dist", "error", "passed", "reason"]
    print(df[cols].to_string(index=False, max_colwidth=60))
    skipped = [f"{i.op}/{i.name}/{i.dtype}: {i.runs_on(device)}" for i in registry.impls(names=a.impls)
               if i.op in a.ops and i.runs_on(device)]
    if skipped:
        print(f"\nnot run on {device}: " + "; ".join(skipped))
    for mod, err in registry.LOAD_ERRORS.items():
        print(f"could not load {mod}: {err}")
    n_bad = int((~df["passed"]).sum())
    print(f"\n{len(df) - n_bad} passed, {n_bad} failed")
    return 1 if n_bad else 0


def cmd_launch_path(a):
    _cuda_or_exit("launch-path")
    _known_impls("launch-path", a.impls)
    from . import launch_path
    out = Path(a.out)
    print(f"launch path: host time per call, stage by stage ({a.shape_set} shapes) -> {out / launch_path.FILE}")
    run, rows = launch_path.measure(out, a.ops, a.impls, a.shape_set, _command_line(), calls=a.calls,
                                    batches=a.batches, force_machine=a.force_machine)
    print(launch_path.summary(rows))
    print(f"run {run}: {len(rows)} rows")


def cmd_serve(a):
    from . import service as sv
    served = [n for n, s in ops.OPS.items() if s.batch is not None]
    names = a.ops or served
    unknown = [n for n in names if n not in ops.OPS]
    if unknown or not names:
        raise MageInputError("serve", "--ops", f"must name operations that say how requests batch; these do: {served}")
    from .service_gpu import check_batching
    for n in names:
        check_batching(ops.OPS[n])
    # the arguments first, so a mistake is named even where nothing could run
    sv.check_positive("--requests", a.requests, whole=True)
    sv.check_positive("--batch", a.batch, whole=True)
    sv.check_positive("--wait-us", a.wait_us, allow_zero=True)
    sv.check_positive("--sweep-limit", a.sweep_limit, whole=True)
    for load in a.loads:
        sv.check_positive("--loads", load)
    if a.items is not None:
        sv.check_positive("--items", a.items, whole=True)
    _known_impls("serve", a.impls)
    _cuda_or_exit("serve")
    from . import measure as m
    from .service_gpu import FILE, measure
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = measure(out, names, a.impls, a.dtypes, a.shape_set, a.items, a.host, a.requests, a.batch, a.wait_us,
                        a.loads, a.sweep_limit, seed=a.seed, pad=not a.no_pad, command=_command_line(),
                        pin=not a.no_pin, force_machine=a.force_machine, log=m.stderr_log)
    print(f"run {run}: {len(rows)} rows in {out / FILE}")


def cmd_amdahl(a):
    with_parts = [n for n, s in ops.OPS.items() if s.parts]
    blocks = a.ops or with_parts
    if not blocks or any(n not in with_parts for n in blocks):
        raise MageInputError("amdahl", "--ops", f"must name blocks that state their parts (Op.parts); these do: "
                                                f"{with_parts}")
    _known_impls("amdahl", [a.baseline, a.custom])
    _cuda_or_exit("amdahl")
    import pandas as pd

    from . import amdahl, amdahl_gpu
    from . import measure as m
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = amdahl_gpu.measure(out, blocks, a.dtypes, a.shapes, a.baseline, a.custom, a.iters, _command_line(),
                                   log=m.stderr_log, pin=not a.no_pin, force_machine=a.force_machine)
    print(amdahl.summary(amdahl.table(pd.DataFrame(rows, columns=amdahl.COLUMNS))))
    print(f"run {run}: {len(rows)} rows in {out / amdahl.FILE}")


def cmd_ceilings(a):
    _cuda_or_exit("ceilings")
    from . import measure as m
    _same_machine(Path(a.out), a.force_machine)
    m.prepare_run(Path(a.out), m.Settings(), _command_line(), log=m.stderr_log)


def cmd_targets(a):
    from . import targets as t
    from .data import load
    print(t.markdown(t.targets(a.data)))
    print("\nHarness precision: " + t.precision_summary(load(a.data)))


def cmd_compare(a):
    from . import compare as c
    from .data import load
    old, new = load(a.old, run="all"), load(a.new, run="all")
    for view in a.views:
        print(c.summary(old, new, view, a.tol))
    if a.spread:
        s = c.spread(new, "event_span")
        s = s[s["runs"] > 1]
        if len(s):
            print(f"\nevent_span across the runs of {a.new}: spread (max - min) / median over {int(s['runs'].max())} "
                  f"runs: median {s['spread'].median():.1%}, worst {s['spread'].max():.1%}")
            print(s.sort_values("spread").to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def cmd_import_published(a):
    from .published import import_published
    df = import_published(Path(a.src), Path(a.out))
    print(f"wrote {len(df)} rows to {a.out}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mage", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    op_names = list(ops.OPS)

    def common(sp):
        sp.add_argument("--ops", nargs="+", default=op_names, choices=op_names)
        sp.add_argument("--impls", nargs="+", default=None, help="implementation names (default: all)")

    def force(sp):
        sp.add_argument("--force-machine", action="store_true",
                        help="write into --out even if its recorded runs come from another machine's GPU")

    sp = sub.add_parser("measure", help="check, then measure the three views into --out (needs CUDA)")
    common(sp)
    sp.add_argument("--shapes", nargs="+", default=["field"], choices=["field", "large", "sweep"])
    sp.add_argument("--cache", nargs="+", default=["warm", "cold"], choices=["warm", "cold"])
    sp.add_argument("--dtypes", nargs="+", default=None, choices=list(ops.PRECISIONS))
    sp.add_argument("--all", action="store_true", help="field, large and sweep shapes, and the tile sweep")
    sp.add_argument("--tiles", action="store_true", help="also run the Triton tile sweep")
    sp.add_argument("--tiles-only", action="store_true")
    sp.add_argument("--no-pin", action="store_true",
                    help="do not pin the process to one core or raise its priority (the default does both)")
    sp.add_argument("--iters", type=_positive_int, default=100)
    sp.add_argument("--spans", type=_positive_int, default=300)
    sp.add_argument("--rounds", type=_positive_int, default=3)
    sp.add_argument("--no-graph", action="store_true")
    sp.add_argument("--passes", nargs="+", default=["forward"], choices=["forward", "backward", "both"],
                    help="forward (the call), backward (the gradients alone, the forward untimed), both")
    sp.add_argument("--out", required=True)
    force(sp)
    sp.set_defaults(fn=cmd_measure)

    sp = sub.add_parser("train", help="a training step of each model block (forward, backward, AdamW): "
                        "steps and items per second, FP32 and bf16 mixed precision (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", default=None, help="blocks (default: every op of kind 'block')")
    sp.add_argument("--impls", nargs="+", default=None)
    sp.add_argument("--shapes", nargs="+", default=["field"], choices=["field", "large"])
    sp.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"],
                    help="fp32, or bf16 (autocast bf16, FP32 master weights)")
    sp.add_argument("--steps", type=_positive_int, default=60, help="timed steps per implementation")
    sp.add_argument("--iters", type=_positive_int, default=20, help="profiled steps")
    sp.add_argument("--no-pin", action="store_true")
    force(sp)
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser("check", help="correctness at awkward shapes (CPU where possible)")
    common(sp)
    sp.add_argument("--trials", type=_positive_int, default=2)
    sp.add_argument("--out", default=None, help="also record the table in OUT/checks.csv")
    force(sp)
    sp.set_defaults(fn=cmd_check)

    sp = sub.add_parser("launch-path", help="where a small call's host time goes, stage by stage (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", choices=list(ops.OPS), default=None)
    sp.add_argument("--impls", nargs="+", default=None)
    sp.add_argument("--shape-set", dest="shape_set", choices=["field", "large", "sweep"], default="field")
    sp.add_argument("--calls", type=_positive_int, default=50, help="back-to-back calls per timed batch")
    sp.add_argument("--batches", type=_positive_int, default=15)
    force(sp)
    sp.set_defaults(fn=cmd_launch_path)

    sp = sub.add_parser("serve", help="latency as a service sees it: closed loop, batch sweep, open loop with a "
                        "dynamic batcher (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", default=None, help="blocks to serve (default: every op with Op.batch)")
    sp.add_argument("--impls", nargs="+", default=None)
    sp.add_argument("--dtypes", nargs="+", default=None, choices=list(ops.PRECISIONS))
    sp.add_argument("--shape-set", dest="shape_set", choices=["field", "large", "sweep"], default="field")
    sp.add_argument("--items", type=int, default=None, help="items per request (default: the spec's Op.batch.items)")
    sp.add_argument("--host", nargs="+", choices=["pinned", "pageable"], default=["pinned", "pageable"])
    sp.add_argument("--requests", type=int, default=2000, help="requests per loop")
    sp.add_argument("--batch", type=int, default=16, help="the batcher's limit B, requests per batch")
    sp.add_argument("--wait-us", dest="wait_us", type=float, default=200.0,
                    help="the batcher's wait D after a batch's first request, microseconds")
    sp.add_argument("--loads", nargs="+", type=float, default=[0.1, 0.3, 0.5, 0.7, 0.9],
                    help="offered load of the open loop, as fractions of the measured peak")
    sp.add_argument("--sweep-limit", dest="sweep_limit", type=int, default=1024,
                    help="the batch sweep stops here or where a batch no longer fits")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--no-pad", action="store_true", help="run batches at their own size (no power-of-two padding)")
    sp.add_argument("--no-pin", action="store_true")
    force(sp)
    sp.set_defaults(fn=cmd_serve)

    sp = sub.add_parser("amdahl", help="each block's kernel time split by operation, the operations alone at the "
                        "block's shapes, and the block speedup Amdahl's law predicts against the measured one (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", default=None, help="blocks (default: every op that states Op.parts)")
    sp.add_argument("--shapes", nargs="+", default=["field"], choices=["field", "large", "sweep"])
    sp.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(ops.PRECISIONS))
    sp.add_argument("--baseline", default="pytorch", help="the column whose time is split (default: eager)")
    sp.add_argument("--custom", default="triton", help="the column whose speedup is predicted")
    sp.add_argument("--iters", type=_positive_int, default=50, help="profiled calls per column and shape")
    sp.add_argument("--no-pin", action="store_true")
    force(sp)
    sp.set_defaults(fn=cmd_amdahl)

    sp = sub.add_parser("ceilings", help="measure copy bandwidth, matmul rates and launch cost (needs CUDA)")
    sp.add_argument("--out", required=True)
    force(sp)
    sp.set_defaults(fn=cmd_ceilings)

    sp = sub.add_parser("import-published", help="the original note's published figures in mage's schema")
    sp.add_argument("src")
    sp.add_argument("--out", default="data/rtx4090-published")
    sp.set_defaults(fn=cmd_import_published)

    sp = sub.add_parser("targets", help="the Triton and Rust speed targets, computed from recorded data")
    sp.add_argument("data", nargs="?", default="data/h200")
    sp.set_defaults(fn=cmd_targets)

    sp = sub.add_parser("compare", help="whether the record NEW reproduces OLD, case by case")
    sp.add_argument("old")
    sp.add_argument("new")
    sp.add_argument("--views", nargs="+", default=["kernel_time"])
    sp.add_argument("--tol", type=float, default=0.03)
    sp.add_argument("--spread", action="store_true", help="also the spread of event spans across NEW's runs")
    sp.set_defaults(fn=cmd_compare)

    sp = sub.add_parser("machine-name", help="the data folder name for this machine's GPU")
    sp.set_defaults(fn=lambda a: print(__import__("mage.env", fromlist=["x"]).machine_name()))

    a = p.parse_args(argv)
    if getattr(a, "all", False):
        a.shapes, a.tiles = ["field", "large", "sweep"], True
    try:
        return a.fn(a) or 0
    except (MageInputError, DataError, OSError) as e:
        # the user's input or files, not a bug: one line, no traceback
        msg = " ".join(str(e).split())
        own = isinstance(e, MageInputError) and e.op == a.cmd
        print(f"mage {msg}" if own else f"mage {a.cmd}: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
