"""Does one column's kernel run slower after another column has run in the same process? Records that put
cuEquivariance beside our bf16 triangle update read ours at N = 1024 at 1,361-1,375 us a call; records of
ours alone read 1,297-1,301, and cuEquivariance's own time was steady in both (kernels/NOTES.md). This probe
times a column in blocks (each call's kernel time from one profile), with its neighbours' calls between
the blocks, and after each block reads one thing a library could leave behind on the device: the L2 set aside
for persisting accesses.

    python tools/probe_neighbours.py --op trimul_block --dtype bf16 --shape N=1024,C=128,H=128 \\
        --column triton --neighbours cuequivariance

Not the record (that is ``mage measure``); its numbers go to kernels/NOTES.md."""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def device_state() -> str:
    """The persisting-L2 limit (bytes) as the CUDA runtime reports it, or why it could not be read."""
    # through cuda-bindings' runtime module: CuPy's runtime, tried first, has no name for this limit (every read
    # on an H100 said AttributeError)
    try:
        from cuda.bindings import runtime as rt
        err, value = rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize)
        if err != rt.cudaError_t.cudaSuccess:
            return f"persisting L2 limit unread ({err})"
        return f"persisting L2 limit {value} B"
    except Exception as e:  # noqa: BLE001 - a probe: say what is missing and go on
        return f"persisting L2 limit unread ({type(e).__name__})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--shape", required=True, help="KEY=VALUE,... as the record names shapes")
    ap.add_argument("--column", required=True, help="the column timed in every block")
    ap.add_argument("--neighbours", nargs="+", required=True, help="columns called between the blocks")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    import torch
    import kernels  # noqa: F401 - registers the columns
    from mage import ops, registry
    from mage.profile import profile
    args = ops.OPS[a.op].inputs(ops.parse_shape(a.shape), seed=1, dtype=a.dtype, device="cuda")

    def call(name):
        impl = registry.get(a.op, name, a.dtype)
        prepared = impl.prepare(*args) if impl.prepare else args
        return lambda: impl.fn(*prepared)

    ours, theirs = call(a.column), {}  # a neighbour is prepared once, after ours has run a block without it
    print(f"{torch.cuda.get_device_name()}; before anything: {device_state()}", flush=True)
    for r in range(a.rounds):
        us = profile(ours, iters=a.iters, warmup=3).per_call_us
        print(f"round {r}: {a.column:16s} median {statistics.median(us):9.1f} us (min {min(us):.1f}, "
              f"max {max(us):.1f}); {device_state()}", flush=True)
        for name in a.neighbours:
            if name not in theirs:
                theirs[name] = call(name)
            us = profile(theirs[name], iters=a.iters, warmup=3).per_call_us
            print(f"round {r}: {name:16s} median {statistics.median(us):9.1f} us; {device_state()}", flush=True)
    us = profile(ours, iters=a.iters, warmup=3).per_call_us
    print(f"after all: {a.column:16s} median {statistics.median(us):9.1f} us; {device_state()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
