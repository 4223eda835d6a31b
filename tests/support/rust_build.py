"""The Rust build as the Rust tests see it (tests/test_rust.py, tests/test_rust_gpu.py): whether the
toolchain is here and why not, skipping (or failing, with MAGE_REQUIRE_RUST=1) when it is absent, and the
build run once a session. Import it after ``pytest.importorskip("kernels._rust")``."""
from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kernels._rust as rust

HERE = Path(rust.__file__).parent


def skip_or_fail(why: str):
    """Skip with the reason shown, unless MAGE_REQUIRE_RUST=1 makes a missing Rust build a failure."""
    if os.environ.get("MAGE_REQUIRE_RUST") == "1":
        pytest.fail(f"MAGE_REQUIRE_RUST=1 but the Rust build cannot run: {why}")
    pytest.skip(why)


def toolchain_missing(candidates=None) -> str | None:
    """Why build.sh cannot run here (None when it can): the things it looks for, in its order."""
    if candidates is None:
        candidates = [os.environ.get("RUSTC"), "/usr/bin/rustc", shutil.which("rustc")]
    found = []
    for rustc in (c for c in candidates if c and os.access(c, os.X_OK)):
        out = subprocess.run([rustc, "--print", "target-list"], capture_output=True, text=True).stdout.split()
        if "nvptx64-nvidia-cuda" in out:
            found.append(rustc)
    if not found:
        return "no rustc with the nvptx64-nvidia-cuda target (apt-get install rustc-web rust-web-src)"
    rustc = found[0]
    version = subprocess.run([rustc, "--version"], capture_output=True, text=True).stdout.split()[1]
    sysroot = subprocess.run([rustc, "--print", "sysroot"], capture_output=True, text=True).stdout.strip()
    sources = [Path(f"/usr/src/rustc-{version}/library"), Path(sysroot) / "lib/rustlib/src/rust/library"]
    if not any((s / "core/src/lib.rs").exists() for s in sources):
        return (f"{rustc} (rustc {version}) has no library sources to build core for the GPU "
                "(apt-get install rust-web-src, or rustup component add rust-src)")
    if not (os.environ.get("PTXAS") or shutil.which("ptxas")):
        return "no ptxas (CUDA toolkit)"
    return None


@functools.cache
def build() -> str:
    """Runs build.sh when the toolchain is here (fast when cached), once a process however many test files
    ask, one process at a time (pytest-xdist's workers share build/: two builds at once overwrite each
    other's files); else the library must exist. The body of each test file's session fixture ``built``."""
    why = toolchain_missing()
    if why is None:
        (HERE / "build").mkdir(exist_ok=True)
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one test run
        stamp = HERE / "build" / ".built-for-run"
        with open(HERE / "build" / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if run and stamp.exists() and stamp.read_text() == run:
                return "built by another worker of this run"
            done = subprocess.run([str(HERE / "build.sh")], capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"build.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            stamp.write_text(run or "")
        return done.stdout
    if rust.available():
        skip_or_fail(f"Rust toolchain absent ({why}) and the library is not built")
    return ""


def needs_toolchain():
    why = toolchain_missing()
    if why:
        skip_or_fail(f"toolchain absent: {why}")
