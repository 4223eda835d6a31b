"""Tidy measurement data: the schema, atomic writes and validated loading of ``data/<machine>/``.

A data directory holds measurement CSVs (one row per value), ``checks.csv``, ``ceilings.csv`` and
``environment.json`` (the environment of each run, keyed by run id). Measuring writes here; pages read.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd

# Every measurement row has these. ``round`` is 0 for a value over all rounds (or a view without rounds)
# and 1..3 for one round of event spans; ``stat`` says which statistic ``value`` is.
REQUIRED = ["op", "impl", "dtype", "shape", "shape_set", "cache", "view", "round", "stat", "value", "unit"]
OPTIONAL = ["family", "flops", "bytes", "floor_us", "achieved_gbps", "achieved_tflops", "frac_of_floor",
            "kernel_names", "flags", "config", "run", "source", "order", "prepare_s", "tile_of", "clocks"]
# host_time: the host's wall-clock time inside the call during the event spans (per round, and overall)
VIEWS = {"kernel_time": "us", "event_span": "us", "graph_span": "us", "launches": "count",
         "copy_time": "us", "prepare_time": "s", "host_time": "us"}
SHAPE_SETS = {"field", "large", "sweep", "tiles", "published"}
CACHES = {"warm", "cold", "n/a"}
CHECK_COLUMNS = ["op", "impl", "dtype", "shape", "dist", "error", "tolerance", "passed", "trials", "reason", "run"]
CEILING_COLUMNS = ["name", "value", "unit", "detail", "run"]

# Files that are not measurement tables
SPECIAL = {"checks.csv": CHECK_COLUMNS, "ceilings.csv": CEILING_COLUMNS,
           "tile_checks.csv": CHECK_COLUMNS + ["config"]}  # the tile sweep's checks, one row per config


class DataError(ValueError):
    """A data file that does not follow the schema: the message says which file and what is wrong."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write aside, then rename: an interrupted run leaves the earlier file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, df.to_csv(index=False))


def merge_csv(df: pd.DataFrame, path: Path, key: list[str]) -> pd.DataFrame:
    """Replace the rows of ``path`` that share ``key`` with ``df``'s (a re-run updates its own rows and
    keeps the rest), then write atomically."""
    path = Path(path)
    if path.exists():
        old = pd.read_csv(path, keep_default_na=False, na_values=[""])
        keys = set(map(tuple, df[key].astype(str).values))
        keep = ~old[key].astype(str).apply(tuple, axis=1).isin(keys)
        df = pd.concat([old[keep], df], ignore_index=True)
    save_csv(df, path)
    return df


def validate(df: pd.DataFrame, where: str) -> pd.DataFrame:
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(f"{where}: missing columns {missing}; a measurement table needs {REQUIRED}")
    if df.empty:
        return df
    bad_view = sorted(set(df["view"]) - set(VIEWS))
    if bad_view:
        raise DataError(f"{where}: unknown view(s) {bad_view}; known: {sorted(VIEWS)}")
    bad_set = sorted(set(df["shape_set"]) - SHAPE_SETS)
    if bad_set:
        raise DataError(f"{where}: unknown shape_set(s) {bad_set}; known: {sorted(SHAPE_SETS)}")
    bad_cache = sorted(set(df["cache"]) - CACHES)
    if bad_cache:
        raise DataError(f"{where}: unknown cache mode(s) {bad_cache}; known: {sorted(CACHES)}")
    values = pd.to_numeric(df["value"], errors="coerce")
    if values.isna().any():
        i = int(values.isna().idxmax())
        raise DataError(f"{where}: row {i + 2} has a non-numeric value {df['value'].iloc[i]!r}")
    for view, unit in VIEWS.items():
        wrong = df[(df["view"] == view) & (df["unit"] != unit)]
        if len(wrong):
            raise DataError(f"{where}: view {view} must be in {unit}, row {int(wrong.index[0]) + 2} says "
                            f"{wrong['unit'].iloc[0]!r}")
    df = df.copy()
    df["value"] = values
    df["round"] = pd.to_numeric(df["round"], errors="raise").astype(int)
    return df


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    except Exception as e:  # noqa: BLE001 - name the file whatever pandas complains about
        raise DataError(f"{path}: cannot be read as CSV ({e})") from e


def load(path) -> pd.DataFrame:
    """All measurement rows under ``path`` (a data directory or one CSV) as one validated DataFrame."""
    path = Path(path)
    if path.is_file():
        return validate(_read(path), str(path))
    if not path.is_dir():
        raise DataError(f"{path}: no such data directory or file")
    frames = []
    for f in sorted(path.glob("*.csv")):
        if f.name in SPECIAL:
            continue
        frames.append(validate(_read(f), str(f)))
    if not frames:
        raise DataError(f"{path}: holds no measurement CSV files")
    return pd.concat(frames, ignore_index=True)


def _load_special(path, name) -> pd.DataFrame:
    f = Path(path) / name
    if not f.exists():
        return pd.DataFrame(columns=SPECIAL[name])
    df = _read(f)
    missing = [c for c in SPECIAL[name] if c not in df.columns]
    if missing:
        raise DataError(f"{f}: missing columns {missing}")
    return df


def load_checks(path) -> pd.DataFrame:
    return _load_special(path, "checks.csv")


def load_ceilings(path) -> pd.DataFrame:
    return _load_special(path, "ceilings.csv")


def ceiling(ceilings: pd.DataFrame, name: str) -> float:
    """The newest value of one ceiling (e.g. 'copy_gbps', 'fp32_tflops')."""
    rows = ceilings[ceilings["name"] == name]
    if rows.empty:
        raise DataError(f"no ceiling named {name!r}; have {sorted(set(ceilings['name']))}")
    return float(rows["value"].iloc[-1])


def load_environment(path) -> dict:
    f = Path(path) / "environment.json"
    return json.loads(f.read_text()) if f.exists() else {}


def add_environment(path, run_id: str, env: dict) -> None:
    envs = load_environment(path)
    envs[run_id] = env
    atomic_write_text(Path(path) / "environment.json", json.dumps(envs, indent=1, sort_keys=True, default=str))
