"""The environment a measurement ran in: the card, the software, and the clocks while it ran.

Every run stores this beside its data, so a figure can say which machine made it and a reader can see
whether clocks moved or the card throttled while the spans were taken.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

# NVML throttle reasons that mean the card slowed itself: software power cap, hardware slowdown,
# software and hardware thermal slowdown, power brake (idle, application clocks and sync boost do not).
_SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def _git_commit() -> str:
    if os.environ.get("MAGE_GIT_COMMIT"):
        return os.environ["MAGE_GIT_COMMIT"]  # the tree may travel without its .git
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=os.path.dirname(__file__)).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def source_digest() -> str:
    """A digest of the code that measures and is measured (mage/ and kernels/: Python, Rust, shell), so a
    record names the code it ran even where the tree travelled with a stale or no .git: the same files
    give the same digest on any machine."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(p for d in ("mage", "kernels") for p in (root / d).rglob("*")
                       if p.suffix in (".py", ".rs", ".sh") and "build" not in p.parts and p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - absent or broken: say so in the record instead of failing
        return "absent"


def _nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001
        return None


def clocks() -> dict:
    """SM and memory clocks (MHz), power (W), temperature (C) and throttle reasons, read through NVML."""
    nv = _nvml()
    if nv is None:
        return {}
    h = nv.nvmlDeviceGetHandleByIndex(torch.cuda.current_device() if torch.cuda.is_available() else 0)
    out = {}
    for key, read in {
        "sm_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "mem_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
        "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "temp_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "throttle": lambda: int(getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons",
                                        getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))(h)),
    }.items():
        try:
            out[key] = read()
        except Exception:  # noqa: BLE001 - a sensor the driver does not expose
            pass
    return out


def clock_warnings(readings: list[dict]) -> list[str]:
    """Flags for a sequence of clock readings: the SM clock moved by more than 5%, or the card throttled."""
    flags = []
    sm = [r["sm_mhz"] for r in readings if "sm_mhz" in r]
    if sm and max(sm) > 1.05 * min(sm):
        flags.append(f"clocks_moved:{min(sm)}-{max(sm)}MHz")
    if any(r.get("throttle", 0) & _SLOWDOWN_MASK for r in readings):
        flags.append("throttled")
    return flags


# Libraries a column or an extension compares with or runs inside (distribution names), declared by the
# modules that use them: a run records the version it measured, so a row is never read against the wrong one
_LIBRARIES: set[str] = set()


def declare_library(*distributions: str) -> None:
    _LIBRARIES.update(distributions)


def library_versions() -> dict:
    """{distribution: version} of the declared libraries installed here ('absent' where one is not)."""
    from importlib import metadata
    out = {}
    for d in sorted(_LIBRARIES):
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = "absent"
    return out


def environment(command: str | None = None) -> dict:
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "triton": _version("triton"), "numpy": _version("numpy"),
        "pandas": _version("pandas"), "cuda": torch.version.cuda or "none",
        "git_commit": _git_commit(), "source_digest": source_digest(), "command": command or " ".join(sys.argv),
    }
    if _LIBRARIES:
        env["libraries"] = library_versions()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=p.name, sm_count=p.multi_processor_count, l2_bytes=getattr(p, "L2_cache_size", None),
                   memory_bytes=p.total_memory, capability=f"{p.major}.{p.minor}")
        nv = _nvml()
        if nv is not None:
            try:
                d = nv.nvmlSystemGetDriverVersion()
                env["driver"] = d.decode() if isinstance(d, bytes) else d
            except Exception:  # noqa: BLE001
                pass
        env["clocks_at_start"] = clocks()
    else:
        env["gpu"] = "none"
    return env


def machine_name() -> str:
    """A short folder name for this card's data: 'h200', 'rtx4090', ..., or 'cpu'."""
    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "").replace("geforce", "")
    for word in ("sxm", "pcie", "nvl", "hbm3", "-", "_"):
        name = name.replace(word, " ")
    words = [w for w in name.split() if not re.fullmatch(r"\d+gb", w)]  # 'H100 80GB HBM3': the memory is no name
    return "".join(words[:2]) or "gpu"
