"""Time inside GPU kernels and launches per call, from a CUPTI profile (torch.profiler).

CUPTI records every kernel of the process, whoever launched it (PyTorch, Triton, CuPy, a Rust library
calling the driver), so all columns are measured the same way. Only time inside kernels counts: the gaps
between launches do not. Copies and memsets are reported apart.
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile as _torch_profile, record_function

from .errors import MageWarning

ITER = "mage::iter"
# Host-side API calls that submit one unit of GPU work; used to count launches per iteration.
_LAUNCH_APIS = ("LaunchKernel", "cuLaunch", "GraphLaunch", "cudaLaunchCooperative")
_COPY_PREFIXES = ("Memcpy", "Memset", "memcpy", "memset")


class ProfileError(RuntimeError):
    """The profile did not record what was asked for; never paper over that with a number."""


@dataclass
class Profile:
    iters: int
    kernel_us: float  # GPU time inside kernels per call
    copy_us: float  # GPU time in memcpy/memset per call
    launches: float  # kernels per call
    kernel_names: list = field(default_factory=list)  # distinct kernel names, most frequent first
    # GPU time per call inside each kernel name (same order as kernel_names): what a block's time
    # splits into, operation by operation (mage.ext.amdahl.attribution)
    kernel_us_by_name: dict = field(default_factory=dict)
    per_iter_launches: list = field(default_factory=list)  # host launch calls seen in each iteration
    # GPU time inside kernels of each call, in order (empty where the kernels do not divide evenly among the
    # calls): the spread behind the mean, which a mean alone hides
    per_call_us: list = field(default_factory=list)
    flags: list = field(default_factory=list)


def _is_copy(name: str) -> bool:
    return name.startswith(_COPY_PREFIXES)


def profile(fn, iters: int = 100, warmup: int = 5, exclude=()) -> Profile:
    """Profile ``iters`` calls of ``fn`` (after ``warmup``), each inside a record_function range.

    ``exclude``: kernel name substrings that belong to the harness, not the call (none by default).
    Raises ProfileError when the iterations or the kernels are missing from the trace.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with _torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            with record_function(ITER):
                fn()
        torch.cuda.synchronize()
    return summarize_events(prof.events(), iters, exclude)


def summarize_events(events, iters: int, exclude=()) -> Profile:
    """Turn profiler events into per-call kernel time and launch counts (split out for testing)."""
    ranges = sorted((e.time_range.start, e.time_range.end) for e in events
                    if e.name == ITER and e.device_type == DeviceType.CPU)
    if len(ranges) != iters:
        raise ProfileError(f"profile recorded {len(ranges)} iterations, expected {iters}")
    # The iteration ranges also appear on the GPU timeline (as user annotations spanning the kernels
    # they launched): they are markers, not work, and would double the count.
    gpu = [e for e in events if e.device_type == DeviceType.CUDA and e.name != ITER
           and not any(x in e.name for x in exclude)]
    kernels = [e for e in gpu if not _is_copy(e.name)]
    copies = [e for e in gpu if _is_copy(e.name)]
    if not kernels and not copies:
        raise ProfileError("profile recorded no GPU activity: is CUPTI tracing this process?")
    dur = lambda e: e.time_range.end - e.time_range.start  # noqa: E731 - microseconds
    flags = []
    # Host launch calls inside each iteration's range: the per-call count must be one stable integer.
    launches = [e for e in events if e.device_type == DeviceType.CPU and any(a in e.name for a in _LAUNCH_APIS)]
    starts = sorted(e.time_range.start for e in launches)
    per_iter, j = [], 0
    for lo, hi in ranges:
        while j < len(starts) and starts[j] < lo:
            j += 1
        k = j
        while k < len(starts) and starts[k] <= hi:
            k += 1
        per_iter.append(k - j)
        j = k
    n_kernels = len(kernels)
    if n_kernels % iters:
        flags.append("launches_unstable")
        warnings.warn(f"{n_kernels} kernels over {iters} iterations is not a whole number per call", MageWarning)
    elif any(per_iter) and len(set(per_iter)) > 1:
        flags.append("launches_unstable")
        warnings.warn(f"host launches per iteration vary: {sorted(Counter(per_iter).items())}", MageWarning)
    if not any(per_iter):
        flags.append("host_launches_not_traced")
    names = [name for name, _ in Counter(e.name for e in kernels).most_common()]
    by_name = dict.fromkeys(names, 0.0)
    for e in kernels:
        by_name[e.name] += dur(e) / iters
    # calls run one after another on one stream, each launching the same kernels: in start order the
    # kernels fall into equal groups, one a call
    per = n_kernels // iters if n_kernels % iters == 0 else 0
    ordered = sorted(kernels, key=lambda e: e.time_range.start)
    per_call = [sum(map(dur, ordered[i * per:(i + 1) * per])) for i in range(iters)] if per else []
    return Profile(iters=iters, kernel_us=sum(map(dur, kernels)) / iters, copy_us=sum(map(dur, copies)) / iters,
                   launches=n_kernels / iters, kernel_names=names, per_iter_launches=per_iter, flags=flags,
                   kernel_us_by_name=by_name, per_call_us=per_call)
