"""Amdahl attribution: does an operation's speedup survive inside a block?

A block's baseline column (PyTorch eager by default) is profiled, and its kernel time split by
operation: every kernel name goes to the first of the block's parts (its ``parts`` facet) with a
pattern that finds it ('other' if none does), so p_i is the share of the block's kernel time spent in
operation i. Each operation is then measured on its own, at the shapes the block calls it at, by the same harness (its
spec's inputs, its check, its profile): s_i is the baseline implementation's kernel time over the
implementation the custom block runs for it (one by construction where the custom block keeps the
library). The prediction is Amdahl's law,

    S = 1 / ((1 - sum p_i) + sum p_i / s_i),

against the measured speedup, the baseline block's kernel time over the custom block's. A part without
an operation to measure (a gate, the residual) keeps s = 1 in the prediction, and its row says so; an
operation that could not be measured (no column at that precision) leaves the case unpredicted.

Rows are tidy (one value each) and live in ``<data folder>/amdahl/amdahl.csv``, beside the measurement
tables rather than among them (their quantities are not the harness's views), with the run's
environment in the folder's ``environment.json``.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

FILE = Path("amdahl") / "amdahl.csv"
COLUMNS = ["run", "block", "dtype", "shape", "shape_set", "impl", "part", "quantity", "value", "unit", "flags",
           "kernel_names"]
KEY = ["run", "block", "dtype", "shape", "impl", "part", "quantity"]
# quantity -> unit. kernel_us: a block column's kernel time (part '') or the share of it in one part;
# op_us: one operation alone at the block's shapes (summed over the block's calls of it), per impl;
# share: p_i (of the baseline column); speedup: s_i; predicted / measured: the block's speedup.
QUANTITIES = {"kernel_us": "us", "op_us": "us", "share": "fraction", "speedup": "x", "predicted": "x",
              "measured": "x"}
OTHER = "other"
TARGET = 0.10  # the target: prediction and measurement within 10%


class AmdahlError(ValueError):
    """The attribution cannot be computed as asked (a share above one, a speedup that is not positive)."""


# ----------------------------------------------------------------------------------------- attribution
def classify(name: str, parts) -> str:
    """The part a kernel name belongs to: the first part with a pattern found in it, else 'other'."""
    for part in parts:
        if any(re.search(p, name, re.IGNORECASE) for p in part.patterns):
            return part.op
    return OTHER


def attribute(by_name: dict, parts, split: dict | None = None) -> dict:
    """Kernel time per part (every part and 'other', zeros included) from kernel time per name.

    ``split``: {part: fraction}; each such part (which must name a ``split_from``) takes that fraction of
    its ``split_from`` part's time, for a column where both run as the same library kernels."""
    out = dict.fromkeys([p.op for p in parts] + [OTHER], 0.0)
    for name, us in by_name.items():
        out[classify(name, parts)] += float(us)
    for part in parts:
        f = (split or {}).get(part.op)
        if f is None:
            continue
        if not part.split_from or part.split_from not in out:
            raise AmdahlError(f"part {part.op!r} names no part to share time with (split_from)")
        if not 0.0 <= f <= 1.0:
            raise AmdahlError(f"part {part.op!r}: a share of {f} of {part.split_from!r} is not between 0 and 1")
        moved = out[part.split_from] * f
        out[part.split_from] -= moved
        out[part.op] += moved
    return out


def split_fraction(own_us: float, other_us: float) -> float:
    """The fraction of a shared library's time that is one part's: its own time in those kernels
    (measured alone at the block's shapes) over both parts' own times."""
    total = own_us + other_us
    return own_us / total if total > 0 else math.nan


def shares(part_us: dict, total_us: float) -> dict:
    """p_i: each part's kernel time over the column's kernel time."""
    if not total_us > 0:
        raise AmdahlError(f"a block's kernel time must be positive, got {total_us}")
    return {k: v / total_us for k, v in part_us.items()}


def predict(p: dict, s: dict) -> float:
    """Amdahl's law over several parts: 1 / ((1 - sum p_i) + sum p_i / s_i). A part missing from ``s`` (or
    NaN there) is not sped up (s = 1)."""
    if any(v < 0 for v in p.values()) or sum(p.values()) > 1 + 1e-9:
        raise AmdahlError(f"shares must be non-negative and sum to at most one, got {p}")
    rest, sped = 1.0 - sum(p.values()), 0.0
    for k, pk in p.items():
        sk = s.get(k, math.nan)
        if isinstance(sk, float) and math.isnan(sk):
            sk = 1.0
        if not sk > 0:
            raise AmdahlError(f"part {k!r}: a speedup must be positive, got {sk}")
        sped += pk / sk
    return 1.0 / (rest + sped)


# ------------------------------------------------------------------------------------------ reading
def load(path, run=None) -> pd.DataFrame:
    """The attribution rows of a data folder (empty, with the columns, when it has none): by default
    each (block, dtype, shape) from the latest run that attributed it; ``run='all'`` or a run id as in
    ``mage.data.load``."""
    from mage.data import DataError, run_order
    f = Path(path) / FILE
    if not f.exists():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(f, keep_default_na=False, na_values=[""])
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{f}: missing columns {missing}")
    bad = sorted(set(df["quantity"]) - set(QUANTITIES))
    if bad:
        raise DataError(f"{f}: unknown quantities {bad}; known: {sorted(QUANTITIES)}")
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    for c in ("impl", "part", "flags", "kernel_names"):
        df[c] = df[c].fillna("").astype(str)
    if df.duplicated(KEY).any():
        raise DataError(f"{f}: the same quantity twice: {df[df.duplicated(KEY)].iloc[0][KEY].to_dict()}")
    if run == "all" or df.empty:
        return df
    if run is not None:
        return df[df["run"] == run].reset_index(drop=True)
    rank = df["run"].map({r: i for i, r in enumerate(sorted(set(df["run"]), key=run_order))})
    case = df[["block", "dtype", "shape"]].astype(str).apply(tuple, axis=1)
    return df[rank == rank.groupby(case).transform("max")].reset_index(drop=True)


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (block, dtype, shape): the measured and predicted speedups, their difference
    (measured over predicted, less one), whether it is within the target, and p_i and s_i per part."""
    cols = ["block", "dtype", "shape", "shape_set", "custom", "measured", "predicted", "difference", "within",
            "baseline_us", "custom_us", "parts", "notes"]
    rows = []
    for (block, dtype, shape), d in df.groupby(["block", "dtype", "shape"], sort=False):
        def one(q, part=""):
            v = d[(d["quantity"] == q) & (d["part"] == part)]["value"]
            return float(v.iloc[0]) if len(v) else math.nan
        kern = d[(d["quantity"] == "kernel_us") & (d["part"] == "")]
        base = kern[kern["impl"] == kern["impl"].iloc[0]] if len(kern) else kern
        custom = d[d["quantity"].isin(["predicted", "measured"])]["impl"]
        custom = custom.iloc[0] if len(custom) else ""
        parts = {}
        kern_parts = d[(d["quantity"] == "kernel_us") & (d["part"] != "")]
        for part in [p for p in dict.fromkeys(d["part"]) if p]:
            mine = kern_parts[kern_parts["part"] == part]
            b, c = _value(mine, base["impl"].iloc[0] if len(base) else ""), _value(mine, custom)
            # eager's time in the part over the custom column's; infinite where the custom column has no
            # kernel of its own there (fused into another part's) while eager spends time in it
            inside = b / c if c > 0 else math.inf if (c == 0 and b > 0) else math.nan
            parts[part] = dict(p=one("share", part), s=one("speedup", part), inside=inside)
        m, p = one("measured"), one("predicted")
        flags = sorted({f for x in d["flags"] for f in x.split(";") if f})
        rows.append(dict(block=block, dtype=dtype, shape=shape, shape_set=d["shape_set"].iloc[0], custom=custom,
                         measured=m, predicted=p, difference=m / p - 1 if p > 0 else math.nan,
                         within=bool(abs(m / p - 1) <= TARGET) if (p > 0 and m == m) else None,
                         baseline_us=float(base["value"].iloc[0]) if len(base) else math.nan,
                         custom_us=_value(kern, custom), parts=parts, notes=";".join(flags)))
    return pd.DataFrame(rows, columns=cols)


def _value(d, impl) -> float:
    v = d[d["impl"] == impl]["value"] if impl else d.iloc[0:0]["value"]
    return float(v.iloc[0]) if len(v) else math.nan


def rows_for_case(block: str, dtype: str, shape: str, shape_set: str, run: str, parts, baseline: str, custom: str,
                  profiles: dict, op_us: dict, names: dict | None = None) -> list[dict]:
    """The tidy rows of one (block, dtype, shape), from what was measured (the GPU half calls this; the
    tests call it with made-up numbers).

    ``profiles``: {impl: {kernel name: us per call}} for the block's baseline and custom columns (a
    missing column is simply absent). ``op_us``: {(part, impl): us} for each part's operation alone at
    the block's shapes, and {(part, impl, 'library'): us}: the part's own time in kernels that its
    ``split_from`` part's patterns claim (for the split); missing entries are unmeasured."""
    base = dict(run=run, block=block, dtype=dtype, shape=shape, shape_set=shape_set, kernel_names="")
    rows = []

    def row(impl, part, quantity, value, flags=()):
        rows.append(dict(base, impl=impl, part=part, quantity=quantity, value=float(value),
                         unit=QUANTITIES[quantity], flags=";".join(flags)))

    by_part = {}
    for impl, by_name in profiles.items():
        split, flags = {}, []
        if impl == baseline:
            for part in parts:
                own = op_us.get((part.op, baseline, "library"), math.nan)
                other = op_us.get((part.split_from, baseline), math.nan) if part.split_from else math.nan
                if part.split_from and own == own and other == other:
                    split[part.op] = split_fraction(own, other)
                    flags.append(f"split:{part.op}<-{part.split_from}")
        total = sum(by_name.values())
        row(impl, "", "kernel_us", total)
        rows[-1]["kernel_names"] = "|".join(by_name)
        by_part[impl] = attribute(by_name, parts, split)
        for part, us in by_part[impl].items():
            row(impl, part, "kernel_us", us, flags)
    for key, us in op_us.items():
        if len(key) == 2 and us == us:
            row(key[1], key[0], "op_us", us)
    if baseline not in profiles:
        return rows
    p = shares(by_part[baseline], sum(profiles[baseline].values()))
    s, missing = {}, []
    for part in parts:
        row(baseline, part.op, "share", p[part.op])
        mine, at = part.column(dtype, custom)
        if mine == baseline and at == dtype:
            s[part.op] = 1.0  # the custom block runs the library's own kernels for it
            row(mine, part.op, "speedup", 1.0, ["same_impl"])
            continue
        b, c = op_us.get((part.op, baseline), math.nan), op_us.get((part.op, mine), math.nan)
        if b == b and c == c and c > 0:
            s[part.op] = b / c
            flags = [f"at:{at}"] if at != dtype else []
            row(mine, part.op, "speedup", b / c, flags + (["tiles:block"] if part.tiles and part.tiles(dtype) else []))
        elif part.shapes is None:  # no operation of its own to measure: taken as not sped up
            row(mine, part.op, "speedup", math.nan, ["not_measured:assumed_1"])
        else:  # an operation that was not measured (no column at this precision, a failed check)
            missing.append(part.op)
            row(mine, part.op, "speedup", math.nan, ["not_measured"])
    row(baseline, OTHER, "share", p[OTHER])
    # no prediction while an operation's speedup is unknown: s = 1 there would predict too little
    predicted = math.nan if missing else predict({k: v for k, v in p.items() if k != OTHER}, s)
    row(custom, "", "predicted", predicted, [f"unpredicted:{'+'.join(missing)}"] if missing else [])
    if custom in profiles:
        row(custom, "", "measured", sum(profiles[baseline].values()) / sum(profiles[custom].values()))
    return rows
