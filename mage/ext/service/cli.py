"""The ``serve`` subcommand: latency as a service sees it (``mage.ext.service.session``)."""
from __future__ import annotations

from pathlib import Path

from mage import facets, ops
from mage.cli_common import (
    _command_line,
    _cuda_or_exit,
    _known_impls,
    _same_machine,
    force,
    subcommand,
)
from mage.errors import MageInputError


def cmd_serve(a):
    from mage.ext.service import loops as sv
    served = [n for n in ops.OPS if facets.get(n, "batch", None) is not None]
    names = a.ops or served
    unknown = [n for n in names if n not in ops.OPS]
    if unknown or not names:
        raise MageInputError("serve", "--ops", f"must name operations that say how requests batch; these do: {served}")
    from mage.ext.service.gpu import check_batching
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
    from mage import measure as m
    from mage.ext.service.session import FILE, measure
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = measure(out, names, a.impls, a.dtypes, a.shape_set, a.items, a.host, a.requests, a.batch, a.wait_us,
                        a.loads, a.sweep_limit, seed=a.seed, pad=not a.no_pad, command=_command_line(),
                        pin=not a.no_pin, force_machine=a.force_machine, log=m.stderr_log)
    print(f"run {run}: {len(rows)} rows in {out / FILE}")


@subcommand(50)
def add_serve(sub):
    sp = sub.add_parser("serve", help="latency as a service sees it: closed loop, batch sweep, open loop with a "
                        "dynamic batcher (needs CUDA)")
    sp.add_argument("--out", required=True)
    sp.add_argument("--ops", nargs="+", default=None, help="blocks to serve (default: every op with a batch facet)")
    sp.add_argument("--impls", nargs="+", default=None)
    sp.add_argument("--dtypes", nargs="+", default=None, choices=list(ops.PRECISIONS))
    sp.add_argument("--shape-set", dest="shape_set", choices=["field", "large", "sweep"], default="field")
    sp.add_argument("--items", type=int, default=None, help="items per request (default: its batch facet's items)")
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
