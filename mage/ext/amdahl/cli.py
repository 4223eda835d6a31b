"""The ``amdahl`` subcommand: each block's kernel time split by operation, and the block speedup
Amdahl's law predicts against the measured one."""
from __future__ import annotations

from pathlib import Path

from mage import facets, ops, registry
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


def cmd_amdahl(a):
    with_parts = [n for n in ops.OPS if facets.get(n, "parts", ())]
    blocks = a.ops or with_parts
    if not blocks or any(n not in with_parts for n in blocks):
        raise MageInputError("amdahl", "--ops", f"must name blocks that state their parts (a parts facet); these do: "
                                                f"{with_parts}")
    a.baseline, a.custom = a.baseline or registry.role("baseline"), a.custom or registry.role("custom")
    _known_impls("amdahl", [a.baseline, a.custom])
    _cuda_or_exit("amdahl")
    import pandas as pd

    from mage import measure as m
    from mage.ext.amdahl import attribution as amdahl
    from mage.ext.amdahl import gpu as amdahl_gpu
    from mage.ext.amdahl import text as amdahl_text
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = amdahl_gpu.measure(out, blocks, a.dtypes, a.shapes, a.baseline, a.custom, a.iters, _command_line(),
                                   log=m.stderr_log, pin=not a.no_pin, force_machine=a.force_machine)
    print(amdahl_text.summary(amdahl.table(pd.DataFrame(rows, columns=amdahl.COLUMNS))))
    print(f"run {run}: {len(rows)} rows in {out / amdahl.FILE}")


@subcommand(60)
def add_amdahl(sub):
    sp = sub.add_parser("amdahl", help="each block's kernel time split by operation, the operations alone at the "
                        "block's shapes, and the block speedup Amdahl's law predicts against the measured one (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", default=None, help="blocks (default: every op that states a parts facet)")
    sp.add_argument("--shapes", nargs="+", default=["field"], choices=["field", "large", "sweep"])
    sp.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(ops.PRECISIONS))
    sp.add_argument("--baseline", default=None, help="the column whose time is split (default: the registry's "
                    "baseline, eager PyTorch)")
    sp.add_argument("--custom", default=None, help="the column whose speedup is predicted (default: the "
                    "registry's custom column)")
    sp.add_argument("--iters", type=_positive_int, default=50, help="profiled calls per column and shape")
    sp.add_argument("--no-pin", action="store_true")
    force(sp)
    sp.set_defaults(fn=cmd_amdahl)
