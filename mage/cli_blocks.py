"""The command line's subcommands about model blocks and calls in context: ``train``, ``launch-path``,
``serve`` and ``amdahl``, each a parser (``add_*``, called by ``mage.__main__`` in help order) and its
handler (``cmd_*``)."""
from __future__ import annotations

from pathlib import Path

from . import facets, ops, registry
from .cli_common import _command_line, _cuda_or_exit, _known_impls, _positive_int, _same_machine, force
from .errors import MageInputError


def cmd_train(a):
    from . import train_session as train
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
    served = [n for n in ops.OPS if facets.get(n, "batch", None) is not None]
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
    from .service_session import FILE, measure
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = measure(out, names, a.impls, a.dtypes, a.shape_set, a.items, a.host, a.requests, a.batch, a.wait_us,
                        a.loads, a.sweep_limit, seed=a.seed, pad=not a.no_pad, command=_command_line(),
                        pin=not a.no_pin, force_machine=a.force_machine, log=m.stderr_log)
    print(f"run {run}: {len(rows)} rows in {out / FILE}")


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

    from . import amdahl, amdahl_gpu, amdahl_text
    from . import measure as m
    out = Path(a.out)
    _same_machine(out, a.force_machine)
    run, rows = amdahl_gpu.measure(out, blocks, a.dtypes, a.shapes, a.baseline, a.custom, a.iters, _command_line(),
                                   log=m.stderr_log, pin=not a.no_pin, force_machine=a.force_machine)
    print(amdahl_text.summary(amdahl.table(pd.DataFrame(rows, columns=amdahl.COLUMNS))))
    print(f"run {run}: {len(rows)} rows in {out / amdahl.FILE}")


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
