"""The ``models`` subcommand: the models the note names, stock and with the project's kernels swapped in."""
from __future__ import annotations

import sys

from mage.cli_common import subcommand

from . import run


def cmd_models(a):
    sys.exit(run.run(a))


@subcommand(65)
def add_models(sub):
    sp = sub.add_parser("models", help="V-JEPA 2's encoder, SchNet and MACE, stock and with the project's kernels "
                        "swapped in: kernel time, spans, launches, kinds of work, Amdahl's prediction (needs CUDA)")
    run.arguments(sp)
    sp.set_defaults(fn=cmd_models)
