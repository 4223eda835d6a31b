"""The GPU half of the Amdahl attribution (``python -m mage amdahl``): profile each block's baseline and
custom columns, and each operation the block calls alone at the block's shapes, with the harness's own
check and profile; the arithmetic and the rows are ``mage.ext.amdahl.attribution``'s."""
from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
import torch

from mage import facets, ops, registry
from mage.check import check
from mage.data import add_new_run, ensure_same_machine, merge_csv
from mage.env import environment
from mage.ext.amdahl import attribution as amdahl
from mage.profile import profile
from mage.session import new_run_id, steady_process

SEED = 1234


def _impl(op: str, name: str, dtype: str):
    """The registered implementation, or None (not every column exists at every precision)."""
    registry.load()
    return next((i for i in registry.impls(op, names=[name], dtype=dtype) if i.callable), None)


def profile_at(im, shape: dict, iters: int, log) -> dict | None:
    """Kernel time per kernel name of ``im`` at ``shape``, after its check; None when it cannot run here
    or fails the check (never timed, as in ``measure``)."""
    if im is None or im.runs_on("cuda"):
        return None
    c = check(im, shape, trials=1, seed=SEED + 17, device="cuda")
    if not c.passed:
        log(f"  refusing to time {im.op}/{im.name}/{im.dtype} {ops.shape_key(shape)}: {c.reason}")
        return None
    spec = ops.OPS[im.op]
    inputs = spec.inputs(shape, seed=SEED, device="cuda", dtype=im.dtype)
    args = im.prepare(*inputs) if im.prepare else inputs
    p = profile(lambda: im.fn(*args), iters=iters)
    torch.cuda.synchronize()
    return dict(p.kernel_us_by_name)


def measure_case(spec, shape: dict, shape_set: str, dtype: str, run: str, baseline: str, custom: str,
                 iters: int, log) -> list[dict]:
    """The rows of one (block, shape, dtype)."""
    profiles = {}
    for name in (baseline, custom):
        got = profile_at(_impl(spec.name, name, dtype), shape, iters, log)
        if got is not None:
            profiles[name] = got
    block_parts = facets.get(spec, "parts")
    parts = {p.op: p for p in block_parts}
    op_us = {}
    for part in block_parts:
        if part.shapes is None or part.op not in ops.OPS:
            continue
        mine = part.column(dtype, custom)
        for name, at in dict.fromkeys([(baseline, dtype), mine]):
            im = _impl(part.op, name, at)
            tiles = part.tiles(dtype) if part.tiles and (name, at) == mine else None
            if im is not None and tiles:
                im = im.variant(**tiles)  # the tiles the block passes, not the operation's default
            total, library = 0.0, 0.0
            for s in part.shapes(shape):
                got = profile_at(im, s, iters, log)
                if got is None:
                    total = math.nan
                    break
                total += sum(got.values())
                if part.split_from in parts:  # its time in the kernels the other part's names claim
                    claim = parts[part.split_from]
                    library += sum(us for k, us in got.items() if amdahl.classify(k, [claim]) == claim.op)
            op_us[(part.op, name)] = total
            if part.split_from and total == total:
                op_us[(part.op, name, "library")] = library
    return amdahl.rows_for_case(spec.name, dtype, ops.shape_key(shape), shape_set, run, block_parts, baseline, custom,
                                profiles, op_us)


def measure(out_dir, blocks, dtypes, shape_sets, baseline=None, custom=None, iters=50, command="",
            log=print, pin=True, force_machine=False):
    """Attribute every block at its shapes of ``shape_sets``; rows into ``out_dir/amdahl/amdahl.csv``,
    written after every case (a run cut short keeps what it measured). ``baseline``/``custom``: default
    to the registry's roles."""
    baseline, custom = baseline or registry.role("baseline"), custom or registry.role("custom")
    out_dir = Path(out_dir)
    registry.load()
    env = environment(command)
    ensure_same_machine(out_dir, env, force=force_machine)
    env["process"] = steady_process(pin)
    env["protocol"] = dict(amdahl=dict(profiled_calls=iters, baseline=baseline, custom=custom, seed=SEED,
                                       method="kernel time per kernel name, names mapped to Op.parts"))
    run = add_new_run(out_dir, new_run_id, env)
    all_rows = []
    for name in blocks:
        spec = ops.OPS[name]
        for shape_set in shape_sets:
            for shape in spec.shapes.get(shape_set, []):
                for dtype in [d for d in dtypes if d in spec.dtypes]:
                    t0 = time.perf_counter()
                    rows = measure_case(spec, shape, shape_set, dtype, run, baseline, custom, iters, log)
                    if rows:
                        merge_csv(pd.DataFrame(rows, columns=amdahl.COLUMNS), out_dir / amdahl.FILE, amdahl.KEY)
                    all_rows += rows
                    log(f"  {name} {ops.shape_key(shape)} {dtype}: {len(rows)} rows ({time.perf_counter() - t0:.1f} s)")
                    torch.cuda.empty_cache()
    return run, all_rows
