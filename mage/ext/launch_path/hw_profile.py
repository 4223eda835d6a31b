"""One implementation's calls at one recorded shape, and nothing else, for a hardware profiler to wrap:
``ncu --set detailed python -m mage.ext.launch_path.hw_profile neighbor_agg rust --shape-set large
--where dist=uniform``.

The harness's views time a call; they cannot say why a kernel stops short of the copy rate (too few
bytes in flight, or instructions the schedulers cannot issue fast enough). A profiler's counters can
(DRAM throughput, achieved occupancy, issue-slot use), but it profiles every kernel a process
launches: this runner launches only the implementation's own kernels after one untimed warm-up call
(compilation, plans), prints what it ran, and records nothing.
"""
from __future__ import annotations

import argparse
import sys

from mage import ops, registry
from mage.errors import MageInputError
from mage.cli_common import parse_where
from mage.measure import selected


def shape_of(op: str, shape_set: str, where: dict) -> dict:
    """The one listed shape of the set that ``where`` selects; refused unless exactly one does."""
    spec = ops.get(op)
    if shape_set not in spec.shapes:
        raise MageInputError(op, "shape_set", f"must be one of {sorted(spec.shapes)}, got {shape_set!r}")
    got = [s for s in spec.shapes[shape_set] if selected(s, where)]
    if len(got) != 1:
        listed = [ops.shape_key(s) for s in spec.shapes[shape_set]]
        raise MageInputError(op, "where", f"must pick one shape of the {shape_set!r} set, picked {len(got)} "
                             f"of {listed}")
    return got[0]


def run(op: str, impl: str, shape_set: str = "large", where: dict | None = None, dtype: str = "fp32",
        calls: int = 3, device: str = "cuda") -> dict:
    """Warm once, then ``calls`` calls of ``impl`` at the selected shape; returns the shape run."""
    if calls < 1:
        raise MageInputError(op, "calls", f"must be at least 1, got {calls}")
    im = registry.get(op, impl, dtype)
    why = im.runs_on(device)
    if why:
        raise MageInputError(op, "impl", f"{impl}/{dtype} cannot run on {device}: {why}")
    shape = shape_of(op, shape_set, where or {})
    spec = ops.get(op)
    inputs = spec.inputs(shape, seed=0, device=device, dtype=dtype)
    args = im.prepare(*inputs) if im.prepare else inputs
    im.fn(*args)  # the warm-up: compilation and host-side plans happen here, once
    for _ in range(calls):
        im.fn(*args)
    if device == "cuda":
        import torch
        torch.cuda.synchronize()
    return shape


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mage.ext.launch_path.hw_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=list(ops.OPS))
    p.add_argument("impl")
    p.add_argument("--shape-set", default="large")
    p.add_argument("--where", nargs="*", default=None, metavar="KEY=VALUE")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--device", default="cuda")
    a = p.parse_args(argv)
    try:
        shape = run(a.op, a.impl, a.shape_set, parse_where(a.where), a.dtype, a.calls, a.device)
    except MageInputError as e:
        print(f"mage.ext.launch_path.hw_profile: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"ran {a.op}/{a.impl}/{a.dtype} at {ops.shape_key(shape)}: 1 warm-up and {a.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
