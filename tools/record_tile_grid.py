"""Record the whole grid a tile explorer could offer: every combination of the values the recorded sweep
varied (the matmul explorer's 384 positions, LayerNorm's 48), on a GPU, into a data folder's tiles.csv:

    python3 -m tools.record_tile_grid --out data/h200 [--ops matmul layernorm] [--dry-run]

Each config is checked, then timed with the sweep's own settings (``mage.measure.measure_tiles``); a run
cut short keeps what it recorded, and a second run re-records only what is missing. Until the grid is
recorded, the book's explorers step only through the recorded configs.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from pathlib import Path


def grid(data: Path, op: str) -> tuple[list[dict], list[dict]]:
    """(every combination of the recorded values of each tile parameter, the ones not yet recorded)."""
    from mage import book
    from mage.book.figure_tiles import explorer_table, tile_table
    t = tile_table(book._load(str(data)).tiles, op)
    if t.empty:
        return [], []
    keys, options, recorded = explorer_table(t, op)
    plain = json.loads(t["config"].iloc[0])
    every = [{**plain, **dict(zip(keys, values))} for values in itertools.product(*(options[k] for k in keys))]
    missing = [c for c in every if "|".join(str(c[k]) for k in keys) not in recorded]
    return every, missing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the data folder whose sweep the explorers show")
    p.add_argument("--ops", nargs="+", default=["matmul", "layernorm"])
    p.add_argument("--dry-run", action="store_true", help="count the configs to record, run nothing")
    a = p.parse_args()
    todo = {}
    for op in a.ops:
        every, missing = grid(Path(a.out), op)
        print(f"{op}: {len(every)} positions, {len(missing)} not recorded")
        todo[op] = missing
    if a.dry_run or not any(todo.values()):
        return 0
    from mage import measure as m, registry
    from mage.cli_common import _cuda_or_exit
    _cuda_or_exit("record_tile_grid")
    st = m.Settings()
    m.prepare_run(Path(a.out), st, "python3 -m tools.record_tile_grid", log=m.stderr_log)
    impls = registry.impls
    for op, configs in todo.items():
        if not configs:
            continue
        # the swept implementation with the missing configs as its sweep, for this run only
        registry.impls = lambda name=None, *args, _op=op, _c=configs, **kw: [
            dataclasses.replace(i, sweep=tuple(_c)) if i.op == _op and i.sweep else i
            for i in impls(name, *args, **kw)]
        try:
            m.measure_tiles([op], ["field"], Path(a.out), st, log=m.stderr_log)
        finally:
            registry.impls = impls
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
