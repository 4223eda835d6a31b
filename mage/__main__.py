"""Command line: ``python -m mage measure|check|ceilings|serve|targets|import-published|machine-name``.

Bad input (an unknown implementation, a missing data folder, a folder of another machine) ends in one
line on stderr and exit status 2, like argparse's own errors; a failed check exits with 1.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

from . import ops, registry
from . import hooks
from .cli_common import (_command_line, _cuda_or_exit, _known_impls, _positive_int, _same_machine, force,
                         parse_where, subcommands)
from .data import DataError
from .errors import MageInputError


def cmd_measure(a):
    _cuda_or_exit("measure")
    from . import measure as m
    _known_impls("measure", a.impls)
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    st = m.Settings(iters=a.iters, spans=a.spans, rounds=a.rounds, graph=not a.no_graph,
                    passes=hooks.check_passes(a.passes))
    cases = [] if a.tiles_only else m.plan(a.ops, a.impls, a.shapes, a.cache, a.dtypes, log=m.stderr_log,
                                            where=parse_where(a.where))
    if not a.tiles_only and not cases:  # measuring nothing must not read as a run: refused before it starts
        raise MageInputError("measure", "--where" if a.where else "--impls", "selects no case")
    t0 = time.perf_counter()
    m.prepare_run(out, st, _command_line(), log=m.stderr_log, pin=not a.no_pin, force_machine=a.force_machine)
    all_rows = []
    if not a.tiles_only:
        rows, checks = m.run_cases(cases, out, st, log=m.stderr_log)
        all_rows.append(rows)
        failed = checks[~checks["passed"]] if len(checks) else checks
        if len(failed):
            print(f"{len(failed)} implementation(s) failed their check and were not timed:")
            print(failed[["op", "impl", "dtype", "shape", "reason"]].to_string(index=False))
    if a.tiles or a.tiles_only:
        m.measure_tiles(a.ops, [s for s in a.shapes if s in ("field", "large")], out, st, log=m.stderr_log,
                        dtypes=a.dtypes, names=a.impls, where=parse_where(a.where))
    print(m.summary_table(all_rows[0]) if all_rows else "")
    print(f"\nwrote {out}/ (run {st.run}) in {time.perf_counter() - t0:.0f} s")


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


def cmd_ceilings(a):
    _cuda_or_exit("ceilings")
    from . import measure as m
    _same_machine(Path(a.out), a.force_machine)
    m.prepare_run(Path(a.out), m.Settings(), _command_line(), log=m.stderr_log)


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


def add_measure(sub, common):
    sp = sub.add_parser("measure", help="check, then measure the three views into --out (needs CUDA)")
    common(sp)
    sp.add_argument("--shapes", nargs="+", default=["field"], choices=ops.shape_sets(),
                    help="shape sets; an operation without a named set is left out of it")
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
    sp.add_argument("--passes", nargs="+", default=list(hooks.DEFAULT), choices=list(hooks.names()),
                    help=hooks.help_text())
    sp.add_argument("--where", nargs="+", default=None, metavar="KEY=VALUE",
                    help="only the shapes with these values (dist=skewed): one case again, not its set")
    sp.add_argument("--out", required=True)
    force(sp)
    sp.set_defaults(fn=cmd_measure)


def add_check(sub, common):
    sp = sub.add_parser("check", help="correctness at awkward shapes (CPU where possible)")
    common(sp)
    sp.add_argument("--trials", type=_positive_int, default=2)
    sp.add_argument("--out", default=None, help="also record the table in OUT/checks.csv")
    force(sp)
    sp.set_defaults(fn=cmd_check)


def add_ceilings(sub, common):
    sp = sub.add_parser("ceilings", help="measure copy bandwidth, matmul rates and launch cost (needs CUDA)")
    sp.add_argument("--out", required=True)
    force(sp)
    sp.set_defaults(fn=cmd_ceilings)


def add_compare(sub, common):
    sp = sub.add_parser("compare", help="whether the record NEW reproduces OLD, case by case")
    sp.add_argument("old")
    sp.add_argument("new")
    sp.add_argument("--views", nargs="+", default=["kernel_time"])
    sp.add_argument("--tol", type=float, default=0.03)
    sp.add_argument("--spread", action="store_true", help="also the spread of event spans across NEW's runs")
    sp.set_defaults(fn=cmd_compare)


def add_machine_name(sub, common):
    sp = sub.add_parser("machine-name", help="the data folder name for this machine's GPU")
    sp.set_defaults(fn=lambda a: print(__import__("mage.env", fromlist=["x"]).machine_name()))


# The core's subcommands and their places in --help; extensions' subcommands fall between them
# (``cli_common.subcommand``).
CORE = ((10, add_measure), (30, add_check), (70, add_ceilings), (100, add_compare), (110, add_machine_name))


def build_parser() -> argparse.ArgumentParser:
    # The command line is where the layers meet: the one place the core loads the extensions' list.
    from .ext import load as load_extensions
    load_extensions()
    p = argparse.ArgumentParser(prog="python -m mage", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    op_names = list(ops.OPS)

    def common(sp):
        sp.add_argument("--ops", nargs="+", default=op_names, choices=op_names)
        sp.add_argument("--impls", nargs="+", default=None, help="implementation names (default: all)")

    added = [(pos, lambda sub, add=add: add(sub, common)) for pos, add in CORE] + subcommands()
    for _, add in sorted(added, key=lambda c: c[0]):
        add(sub)
    return p


def main(argv=None):
    a = build_parser().parse_args(argv)
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
