"""Tidy measurement data: the schema, atomic writes (``mage.data_files``) and validated loading of
``data/<machine>/``.

A data directory holds measurement CSVs (one row per value), ``checks.csv``, ``ceilings.csv`` and
``environment.json`` (the environment of each run, keyed by run id). Measuring writes here; pages read.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd

# save_csv and merge_csv stay importable from here, where the callers look for them
from .data_files import atomic_write_text, locked, merge_csv, save_csv  # noqa: F401
from .data_pass import with_pass

# Every measurement row has these. ``round`` is 0 for a value over all rounds (or a view without rounds)
# and 1..3 for one round of event spans; ``stat`` says which statistic ``value`` is.
REQUIRED = ["op", "impl", "dtype", "shape", "shape_set", "cache", "view", "round", "stat", "value", "unit"]
OPTIONAL = ["family", "flops", "bytes", "floor_us", "achieved_gbps", "achieved_tflops", "frac_of_floor",
            "kernel_names", "flags", "config", "run", "source", "order", "prepare_s", "tile_of", "clocks", "stage",
            # the service experiment (mage.ext.service.loops): which loop ('closed', 'open', 'batch_sweep'), the host
            # memory the requests live in ('pinned', 'pageable'), the batcher's limit B and wait D, the offered
            # load (a fraction of the measured peak) and rate (requests/s), and one histogram bin's batch size
            "loop", "host_mem", "batch", "wait_us", "load", "rate", "batch_size", "pass"]  # pass: mage.data_pass
# host_time: the host's wall-clock time inside the call during the event spans (per round, and overall)
VIEWS = {"kernel_time": "us", "event_span": "us", "graph_span": "us", "launches": "count",
         "copy_time": "us", "prepare_time": "s", "host_time": "us",
         "host_stage": "us",  # one stage of a call's host path (mage.ext.launch_path.breakdown), named in 'stage'
         # the service experiment (mage.ext.service.loops): a request's latency from its inputs in host memory to
         # its output back there (stat p50/p90/p99/p999/max/mean); one part of it (h2d, compute, d2h,
         # other, queue; named in 'stage') and that part's share of the mean latency; items per second;
         # batches of one size ('batch_size'), and requests served
         "latency": "us", "latency_part": "us", "latency_share": "fraction", "throughput": "items/s",
         "batch_hist": "batches", "requests": "count",
         "host_call": "us",  # the host's time inside a served call (its checks and launches): beside the parts
         "train_step": "us", "train_part": "us",  # a block's training step, and its parts (mage.ext.training.train)
         "kernel_part": "us"}  # a model's kernel time in one kind of work, named in 'stage' (mage.ext.models)
# service: one request's shape; train: a block's training step (mage.ext.training.train), at its field or large shape
# model: a whole model's forward at a published configuration (mage.ext.models); contest: a published
# task's benchmark shapes (the triangle update's GPU MODE form); af3: the sizes AlphaFold 3-class models run
# the triangle update at (the library comparison)
SHAPE_SETS = {"field", "large", "sweep", "tiles", "published", "service", "train", "model", "contest", "af3"}
CACHES = {"warm", "cold", "n/a"}
CHECK_COLUMNS = ["op", "impl", "dtype", "shape", "dist", "error", "tolerance", "passed", "trials", "reason", "run"]
CEILING_COLUMNS = ["name", "value", "unit", "detail", "run"]

# Files that are not measurement tables
SPECIAL = {"checks.csv": CHECK_COLUMNS, "ceilings.csv": CEILING_COLUMNS,
           "tile_checks.csv": CHECK_COLUMNS + ["config"]}  # the tile sweep's checks, one row per config


class DataError(ValueError):
    """A data file that does not follow the schema: the message says which file and what is wrong."""


# Columns that name one measured value. Within one run a re-measured value replaces the old row; rows of
# different runs never replace each other (``merge_csv`` always adds ``run``), and ``load`` picks one run.
IDENTITY = ["op", "impl", "dtype", "shape", "shape_set", "cache", "pass", "view", "round", "stat", "run", "config",
            "tile_of", "stage", "loop", "host_mem", "batch", "wait_us", "load", "batch_size"]
# What one case is: the rows one implementation got at one shape in one run (a service case also by its
# loop, host memory, batcher and load; files without these columns group exactly as before).
CASE = ["op", "impl", "dtype", "shape", "cache", "pass", "shape_set", "config", "tile_of", "loop", "host_mem", "batch",
        "wait_us", "load"]
CHECK_CASE = ["op", "impl", "dtype", "shape", "dist", "config"]
NUMERIC_OPTIONAL = ["flops", "bytes", "floor_us", "achieved_gbps", "achieved_tflops", "frac_of_floor",
                    "prepare_s", "batch", "wait_us", "load", "rate", "batch_size"]
_STAMP = re.compile(r"^\d{8}T\d{6}Z")


def _row(df, i) -> int:
    return int(df["_line"].iloc[i]) if "_line" in df.columns else int(df.index[i]) + 2


def validate(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """Check one table against the schema; every problem names ``where`` and the row (its line number in
    the file, the header being line 1)."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(f"{where}: missing columns {missing}; a measurement table needs {REQUIRED}")
    if df.empty:
        return df
    df = df.reset_index(drop=True)
    for col in REQUIRED:
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise DataError(f"{where}: row {_row(df, int(empty.idxmax()))}: {col} is empty")
    for col, known in (("view", set(VIEWS)), ("shape_set", SHAPE_SETS), ("cache", CACHES)):
        bad = sorted(set(df[col]) - known)
        if bad:
            what = {"view": "view", "shape_set": "shape_set", "cache": "cache mode"}[col]
            i = int((~df[col].isin(known)).idxmax())
            raise DataError(f"{where}: row {_row(df, i)}: unknown {what}(s) {bad}; known: {sorted(known)}")
    values = pd.to_numeric(df["value"], errors="coerce")
    if values.isna().any():
        i = int(values.isna().idxmax())
        raise DataError(f"{where}: row {_row(df, i)} has a non-numeric value {df['value'].iloc[i]!r}")
    rounds = pd.to_numeric(df["round"], errors="coerce")
    bad = rounds.isna() | (rounds != rounds.round())
    if bad.any():
        i = int(bad.idxmax())
        raise DataError(f"{where}: row {_row(df, i)}: round {str(df['round'].iloc[i])!r} is not a whole number")
    for view, unit in VIEWS.items():
        wrong = df[(df["view"] == view) & (df["unit"] != unit)]
        if len(wrong):
            raise DataError(f"{where}: view {view} must be in {unit}, row {_row(df, int(wrong.index[0]))} says "
                            f"{wrong['unit'].iloc[0]!r}")
    df = df.copy()
    for col in NUMERIC_OPTIONAL:
        if col in df.columns:
            num = pd.to_numeric(df[col], errors="coerce")
            bad = num.isna() & df[col].notna() & (df[col].astype(str).str.strip() != "")
            if bad.any():
                i = int(bad.idxmax())
                raise DataError(f"{where}: row {_row(df, i)}: {col} {str(df[col].iloc[i])!r} is not a number")
            df[col] = num
    df["value"] = values
    df["round"] = rounds.astype(int)
    return df


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    except Exception as e:  # noqa: BLE001 - name the file whatever pandas complains about
        raise DataError(f"{path}: cannot be read as CSV ({e})") from e


def _no_duplicates(df: pd.DataFrame, columns: list[str]) -> None:
    """Two rows for one measured value (same run included) would be averaged or picked at random later:
    refuse, naming both places and the key."""
    key = [c for c in columns if c in df.columns]
    dup = df.duplicated(key, keep=False)
    if not dup.any():
        return
    rows = df[dup].astype({c: str for c in key})
    first = rows.iloc[0]
    same = rows[(rows[key] == first[key]).all(axis=1)].iloc[:2]
    a, b = same.iloc[0], same.iloc[1]
    where = (f"{a['_file']}: rows {a['_line']} and {b['_line']}" if a["_file"] == b["_file"]
             else f"{a['_file']} row {a['_line']} and {b['_file']} row {b['_line']}")
    ident = ", ".join(f"{c}={first[c]}" for c in key if first[c] not in ("", "nan"))
    raise DataError(f"{where} are the same measurement ({ident}); each value must appear once")


def run_order(run_id: str) -> tuple:
    """Sort key of run ids, oldest first: timestamped ids (``20261203T073209Z-h200``) by their time, after
    any id without a time stamp (an old check run, an import)."""
    return (1, run_id) if _STAMP.match(run_id) else (0, run_id)


def select_run(df: pd.DataFrame, run, case: list[str], where) -> pd.DataFrame:
    """``run=None``: each case from the latest run that measured it; ``"all"``: every run's rows; a run id
    (or a list of them): only those runs."""
    if "run" not in df.columns or df.empty or (isinstance(run, str) and run == "all"):
        return df
    runs = df["run"].fillna("").astype(str)
    if run is not None:
        wanted = [run] if isinstance(run, str) else list(run)
        missing = [r for r in wanted if r not in set(runs)]
        if missing:
            raise DataError(f"{where}: no rows of run {missing[0]!r}; it holds {sorted(set(runs), key=run_order)}")
        return df[runs.isin(wanted)].reset_index(drop=True)
    key = [c for c in case if c in df.columns]
    rank = runs.map({r: i for i, r in enumerate(sorted(set(runs), key=run_order))})
    ident = df[key].fillna("").astype(str)
    if "config" in ident.columns and "shape_set" in df.columns:
        # The config names the case only in the tile sweep; elsewhere it describes what ran, and a run
        # that records it differently (a retuned default) still replaces the earlier run's case.
        ident.loc[df["shape_set"].astype(str) != "tiles", "config"] = ""
    # grouped by the key columns themselves: a tuple per row (apply) took seconds on a full record
    cases = [ident[c] for c in ident.columns] if key else pd.Series(0, index=df.index)
    return df[rank == rank.groupby(cases, sort=False).transform("max")].reset_index(drop=True)


def load(path, run=None) -> pd.DataFrame:
    """All measurement rows under ``path`` (a data directory or one CSV) as one validated DataFrame.

    A folder keeps every run's rows. ``run=None`` (the default) gives each case (operation,
    implementation, dtype, shape, cache, shape set; tile config) from the latest run that measured it,
    so rows of two runs are never mixed within a case; ``run="all"`` gives every run's rows; a run id
    (or a list of ids) gives only those runs. Problems (schema, unparsable values, the same value twice)
    raise ``DataError`` naming the file and row.

    The frame is tidy: one value per row, and ``stat`` says which statistic it is (mean, median, min,
    p90, ...), ``round`` which round of spans (0: over all rounds). A plain ``groupby(...).value.mean()``
    would average medians, minima and p90s together: select the rows a figure or table needs through
    ``mage.views``, which picks one view, one statistic and one round.
    """
    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = [f for f in sorted(path.glob("*.csv")) if f.name not in SPECIAL]
        if not files:
            raise DataError(f"{path}: holds no measurement CSV files")
    else:
        raise DataError(f"{path}: no such data directory or file")
    frames = []
    for f in files:
        raw = _read(f)
        raw = with_pass(raw.assign(_file=str(f), _line=raw.index + 2), str(f), DataError)
        frames.append(validate(raw, str(f)))
    df = pd.concat(frames, ignore_index=True)
    _no_duplicates(df, IDENTITY)
    df = df.drop(columns=["_file", "_line"])
    return select_run(df, run, CASE, path)


def _load_special(path, name, run=None) -> pd.DataFrame:
    f = Path(path) / name
    if not f.exists():
        return pd.DataFrame(columns=SPECIAL[name])
    df = _read(f)
    missing = [c for c in SPECIAL[name] if c not in df.columns]
    if missing:
        raise DataError(f"{f}: missing columns {missing}")
    return df if name == "ceilings.csv" else select_run(df, run, CHECK_CASE, f)


def load_checks(path, run=None) -> pd.DataFrame:
    """The correctness checks; ``run`` as in ``load`` (default: each check from the latest run that made it)."""
    return _load_special(path, "checks.csv", run)


def load_ceilings(path) -> pd.DataFrame:
    """Every run's ceilings (``ceiling`` takes the newest)."""
    return _load_special(path, "ceilings.csv")


def ceiling(ceilings: pd.DataFrame, name: str) -> float:
    """The newest value of one ceiling (e.g. 'copy_gbps', 'fp32_tflops')."""
    rows = ceilings[ceilings["name"] == name]
    if rows.empty:
        raise DataError(f"no ceiling named {name!r}; have {sorted(set(ceilings['name']))}")
    return float(rows["value"].iloc[-1])


def load_environment(path) -> dict:
    """``environment.json``: run id -> that run's environment (empty when the folder has none yet)."""
    f = Path(path) / "environment.json"
    if not f.exists():
        return {}
    try:
        envs = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{f}: cannot be read as JSON ({e})") from e
    if not isinstance(envs, dict) or not all(isinstance(v, dict) for v in envs.values()):
        raise DataError(f"{f}: must map each run id to an object describing that run's environment")
    return envs


def add_new_run(path, make_id, env: dict) -> str:
    """Record ``env`` under a run id that ``path`` does not hold yet and return the id. Ids are stamped
    to the second, so a second run started in the same second (two quick invocations, two processes)
    waits for the next second instead of sharing an id and mixing its rows with the first run's."""
    f = Path(path) / "environment.json"
    Path(path).mkdir(parents=True, exist_ok=True)
    with locked(f):
        envs = load_environment(path)
        run_id = make_id()
        while run_id in envs:
            time.sleep(0.05)
            run_id = make_id()
        envs[run_id] = env
        atomic_write_text(f, json.dumps(envs, indent=1, sort_keys=True, default=str))
    return run_id


def add_environment(path, run_id: str, env: dict) -> None:
    f = Path(path) / "environment.json"
    with locked(f):
        envs = load_environment(path)
        envs[run_id] = env
        atomic_write_text(f, json.dumps(envs, indent=1, sort_keys=True, default=str))


def ensure_same_machine(path, env: dict, force: bool = False) -> None:
    """Refuse to write this machine's rows into a folder whose recorded runs all come from another card
    (a CPU check landing in the H200 record, say), unless ``force``. Machines are told apart by the GPU
    name in their environment ('none' without one); a folder with no environment yet belongs to nobody."""
    if force:
        return
    here = str(env.get("gpu", "none"))
    theirs = {str(e.get("gpu", "none")) for e in load_environment(path).values()}
    if theirs and here not in theirs:
        raise DataError(f"{path} holds runs of {', '.join(sorted(theirs))}; this machine is {here!r}. Write "
                        "into another folder, or pass --force-machine to add this machine's rows there anyway")
