"""The Amdahl attribution in words (``mage.ext.amdahl.attribution`` holds the arithmetic and the rows): where a
prediction misses, one sentence per block, a text summary, and a part list for the table."""
from __future__ import annotations

import math

import pandas as pd

from mage import facets

from .attribution import OTHER, TARGET, predict


def locate(r) -> tuple[str, float] | None:
    """For a case outside the target: the part whose speedup in the prediction (its operation's alone,
    or 1 for a part without one), replaced by its speedup inside the blocks (eager's kernel time in that
    part over the custom column's), brings the prediction nearest the measurement, and the difference
    left. None where nothing is predicted or measured. (All parts at their in-block speedups would
    return the measurement by construction; one part at a time shows where the prediction's picture of
    the block failed.)"""
    if not (r.predicted == r.predicted and r.measured == r.measured) or r.within:
        return None
    p = {k: v["p"] for k, v in r.parts.items() if k != OTHER and v["p"] == v["p"]}
    s = {k: v["s"] for k, v in r.parts.items() if v["s"] == v["s"]}
    best = None
    for k in p:
        inside = r.parts[k].get("inside", math.nan)
        if not (inside == inside and inside > 0):
            continue
        gap = r.measured / predict(p, {**s, k: inside}) - 1
        if best is None or abs(gap) < abs(best[1]):
            best = (k, gap)
    return best


def located(t: pd.DataFrame) -> str:
    """One sentence per case outside the target: the part ``locate`` finds, its speedup alone and
    inside the blocks, and what is left of the difference with the in-block one."""
    from mage.ops import OPS
    out = []
    for r in t.itertuples():
        hit = locate(r)
        if hit is None:
            continue
        k, gap = hit
        v = r.parts[k]
        alone = f"{v['s']:.2f}x alone" if v["s"] == v["s"] else "taken as 1x (no operation of its own)"
        name = facets.get(r.block, "label") if r.block in OPS else r.block
        part = facets.get(k, "label") if k in OPS else f"the {k} part"
        inside = ("has no kernel of its own inside the block (fused into another part's)" if v["inside"] == math.inf
                  else f"{v['inside']:.2f}x inside the block")
        out.append(f"The {name} at {r.dtype}: {part} is {alone} but {inside}; with that one part's in-block speedup the "
                   f"prediction's difference falls from {r.difference:+.0%} to {gap:+.0%}"
                   + ("." if abs(gap) <= TARGET else ", so more than one part moved."))
    return " ".join(out)


def summary(t: pd.DataFrame) -> str:
    """The table as text: one line per case, then its parts' p and s."""
    if t.empty:
        return "(no attribution rows)"
    lines = []
    for r in t.itertuples():
        lines.append(f"{r.block} {r.dtype} {r.shape}: measured {r.measured:.3f}x, predicted {r.predicted:.3f}x "
                     f"(difference {r.difference:+.1%}; {'within' if r.within else 'not within'} {TARGET:.0%})")
        for part, v in r.parts.items():
            lines.append(f"    {part:>14}: p = {v['p']:.3f}, s = {v['s']:.3f}")
    return "\n".join(lines)


