"""The ``launch-path`` subcommand: where a small call's host time goes, stage by stage."""
from __future__ import annotations

from pathlib import Path

from mage import ops
from mage.cli_common import (
    _command_line,
    _cuda_or_exit,
    _known_impls,
    _positive_int,
    force,
    subcommand,
)


def cmd_launch_path(a):
    _cuda_or_exit("launch-path")
    _known_impls("launch-path", a.impls)
    from mage.ext.launch_path import breakdown as launch_path
    out = Path(a.out)
    print(f"launch path: host time per call, stage by stage ({a.shape_set} shapes) -> {out / launch_path.FILE}")
    run, rows = launch_path.measure(out, a.ops, a.impls, a.shape_set, _command_line(), calls=a.calls,
                                    batches=a.batches, force_machine=a.force_machine)
    print(launch_path.summary(rows))
    print(f"run {run}: {len(rows)} rows")


@subcommand(40)
def add_launch_path(sub):
    sp = sub.add_parser("launch-path", help="where a small call's host time goes, stage by stage (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", choices=list(ops.OPS), default=None)
    sp.add_argument("--impls", nargs="+", default=None)
    sp.add_argument("--shape-set", dest="shape_set", choices=["field", "large", "sweep"], default="field")
    sp.add_argument("--calls", type=_positive_int, default=50, help="back-to-back calls per timed batch")
    sp.add_argument("--batches", type=_positive_int, default=15)
    force(sp)
    sp.set_defaults(fn=cmd_launch_path)
