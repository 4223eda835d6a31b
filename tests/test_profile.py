"""Kernel time and launch counting from profiler events, with fake events in place of a GPU trace."""
from types import SimpleNamespace as NS

import pytest
from torch.autograd import DeviceType

from mage.errors import MageWarning
from mage.profile import ITER, ProfileError, summarize_events


def ev(name, start, end, device=DeviceType.CUDA):
    return NS(name=name, device_type=device, time_range=NS(start=start, end=end))


def trace(per_iter, iters=3, kernel_us=2.0):
    """``per_iter`` kernels per iteration, each with its host launch call, plus the annotations."""
    events = []
    for i in range(iters):
        t = 100 * i
        events.append(ev(ITER, t, t + 50, DeviceType.CPU))
        events.append(ev(ITER, t + 1000, t + 1060))  # the range mirrored on the GPU timeline
        for k in range(per_iter[i] if isinstance(per_iter, list) else per_iter):
            events.append(ev("cudaLaunchKernel", t + 5 + k, t + 6 + k, DeviceType.CPU))
            events.append(ev(f"kernel_{k}", t + 1000 + 10 * k, t + 1000 + 10 * k + kernel_us))
    return events


def test_kernel_time_and_launches_per_call():
    p = summarize_events(trace(2) + [ev("Memset (Device)", 0, 4)], iters=3)
    assert p.launches == 2 and p.kernel_us == pytest.approx(4.0) and p.copy_us == pytest.approx(4 / 3)
    assert p.kernel_names == ["kernel_0", "kernel_1"] and p.per_iter_launches == [2, 2, 2]
    assert "launches_unstable" not in p.flags
    assert p.per_call_us == pytest.approx([4.0, 4.0, 4.0])


def test_each_calls_kernel_time_in_order():
    # the third call's kernels run longer; the trace lists them out of order, as a profile may
    events = trace(2)
    for e in events:
        if e.name.startswith("kernel_") and e.time_range.start >= 1200:
            e.time_range.end += 3
    p = summarize_events(events[::-1], iters=3)
    assert p.per_call_us == pytest.approx([4.0, 4.0, 10.0]) and p.kernel_us == pytest.approx(6.0)


def test_unstable_launch_count_is_flagged():
    with pytest.warns(MageWarning, match="vary"):
        p = summarize_events(trace([1, 2, 3]), iters=3)
    assert "launches_unstable" in p.flags and p.launches == 2


def test_fractional_launch_count_is_flagged():
    with pytest.warns(MageWarning, match="not a whole number"):
        p = summarize_events(trace([1, 1, 2]), iters=3)
    assert "launches_unstable" in p.flags and p.per_call_us == []  # 4 kernels over 3 calls: no grouping


def test_missing_iterations_fail_loudly():
    with pytest.raises(ProfileError, match="recorded 3 iterations, expected 100"):
        summarize_events(trace(1), iters=100)


def test_empty_profile_fails_loudly():
    events = [e for e in trace(1) if e.device_type == DeviceType.CPU]
    with pytest.raises(ProfileError, match="no GPU activity"):
        summarize_events(events, iters=3)
