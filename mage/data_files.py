"""Writing data files safely: atomically (write aside, then rename) and under a lock for a
read-modify-write, so an interrupted run keeps the earlier file and two runs merging into one file each
keep the other's rows. ``mage.data`` re-exports these; it holds the schema and the loading.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from pathlib import Path

import pandas as pd


def _umask() -> int:
    # read where the kernel shows it: setting the umask, even briefly, is visible to every thread
    status = Path("/proc/self/status")
    lines = status.read_text().splitlines() if status.exists() else []
    found = [int(x.split()[1], 8) for x in lines if x.startswith("Umask:")]
    if found:
        return found[0]
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write_text(path: Path, text: str) -> None:
    """Write aside, then rename: an interrupted run leaves the earlier file intact. The new file keeps the
    mode of the one it replaces (a fresh file gets the usual 0666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive lock for a read-modify-write of ``path``: a lock file beside it (``.NAME.lock``,
    never deleted, so every writer locks the same file), so two runs merging into one file at once
    each see the other's rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def save_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, df.to_csv(index=False))


def merge_csv(df: pd.DataFrame, path: Path, key: list[str]) -> pd.DataFrame:
    """Replace the rows of ``path`` that share ``key`` with ``df``'s (a re-run updates its own rows and
    keeps the rest), then write atomically, under the file's lock. ``run`` is always part of the key when
    the rows carry one, so a new run adds its rows beside the earlier runs' instead of replacing them."""
    path = Path(path)
    if "run" in df.columns and "run" not in key:
        key = [*key, "run"]
    with locked(path):
        if path.exists():
            old = pd.read_csv(path, keep_default_na=False, na_values=[""])
            for k in key:  # a column new to this file: the old rows had no value there
                if k not in old.columns:
                    old[k] = ""
            # blank == NaN == a key column the rows do not carry (service rows have no pass, say)
            as_text = lambda t: t.reindex(columns=key).fillna("").astype(str).apply(tuple, axis=1)  # noqa: E731
            keep = ~as_text(old).isin(set(as_text(df)))
            df = pd.concat([old[keep], df], ignore_index=True)
        save_csv(df, path)
    return df
