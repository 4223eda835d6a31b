"""One tidy row of a measured case: the implementation, view, value and unit of one pass, with the floor
this run's ceilings give it and the rates it achieved (mage.measure makes every row through here)."""
from __future__ import annotations

import json

from . import ops


def derived(view, value, flops, nbytes_, dtype, ceil):
    """Floor (the larger of bytes over bandwidth and FLOPs over rate) and the achieved rates; no floor
    where the cost is not stated (a backward whose facets give no grad_flops / grad_bytes)."""
    if flops is None or nbytes_ is None:
        return {}
    out = {"flops": flops, "bytes": nbytes_}
    if view in ("kernel_time", "event_span", "graph_span") and ceil:
        floor_us = max(nbytes_ / (ceil["copy_gbps"] * 1e3), flops / (ops.peak_tflops(ceil, dtype) * 1e6))
        out["floor_us"] = floor_us
        if value > 0:
            out.update(achieved_gbps=nbytes_ / (value * 1e3), achieved_tflops=flops / (value * 1e6),
                       frac_of_floor=floor_us / value)
    return out


def _row_maker(base, shape, pass_, cost, ceilings):
    """row(im, view, value, unit, ...) -> one tidy row of this case and pass, with its floor and rates."""
    def row(im, view, value, unit, rnd=0, stat="mean", **extra):
        config = im.config_at(shape)
        r = dict(base, impl=im.name, family=im.family, view=view, round=rnd, stat=stat, value=value, unit=unit,
                 config=json.dumps(config, sort_keys=True) if config else "", **{"pass": pass_})
        r.update(derived(view, value, *cost, base["dtype"], ceilings))
        r.update(extra)
        return r
    return row
