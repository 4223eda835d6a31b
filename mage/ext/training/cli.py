"""The ``train`` subcommand: a training step of each model block (``mage.ext.training.session``)."""
from __future__ import annotations

from pathlib import Path

from mage import ops
from mage.cli_common import (
    _command_line,
    _cuda_or_exit,
    _known_impls,
    _positive_int,
    _same_machine,
    force,
    subcommand,
)
from mage.errors import MageInputError


def cmd_train(a):
    from mage.ext.training import session as train
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


@subcommand(20)
def add_train(sub):
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
