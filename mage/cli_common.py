"""What the command line's subcommands share (``mage.__main__`` and the extensions' ``cli`` modules):
the subcommands extensions add, refusing early when there is no GPU, an unknown implementation or another
machine's data folder, and the command as retyped."""
from __future__ import annotations

import argparse
import shlex
import sys

from . import registry
from .errors import MageInputError

# The subcommands extensions add: (position, add(sub)), see ``subcommand``.
_SUBCOMMANDS: list = []


def subcommand(position: int):
    """Decorator for ``add(sub)``, which adds one subcommand to the parser's subparsers ``sub`` and sets its
    handler (``sp.set_defaults(fn=...)``). ``position`` places it in ``--help`` among the core's own:
    measure 10, check 30, ceilings 70, compare 100, machine-name 110."""
    def deco(add):
        _SUBCOMMANDS.append((position, add))
        return add
    return deco


def subcommands() -> list:
    """(position, add) of every subcommand an extension added so far."""
    return list(_SUBCOMMANDS)


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


def force(sp):
    """The --force-machine option of every subcommand that writes into a data folder."""
    sp.add_argument("--force-machine", action="store_true",
                    help="write into --out even if its recorded runs come from another machine's GPU")


def parse_where(pairs) -> dict:
    """``--where key=value ...`` as {key: value} for ``measure.selected``; a pair without '=' is refused."""
    out = {}
    for p in pairs or ():
        key, eq, value = p.partition("=")
        if not eq or not key:
            raise MageInputError("measure", "--where", f"takes key=value pairs (dist=skewed), not {p!r}")
        out[key] = value
    return out
