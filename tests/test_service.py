"""The service experiment's loops and statistics (mage.ext.service.loops, mage.ext.service.stats): the loops with a
fake clock and a fake executor (known arrivals give known waits and batches, worked out by hand below),
the batcher's promises on random arrivals, nearest-rank percentiles against numpy, the rows in the data
schema, bad arguments to the loops and the command. The executor (mage.ext.service.gpu) is
tests/test_service_executor.py's."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch

from mage import data
from mage.__main__ import main
from mage.errors import MageInputError
from mage.ext.service.loops import MemoryLimit, batch_sizes, batch_sweep, closed_loop, open_loop, poisson_arrivals
from mage.ext.service.stats import base_row, percentile, peak_requests_per_s, summary, sweep_rows, trace_rows

from tests.support.service_fakes import FakeClock, FakeExecutor
from tests.support.service_tiny import tiny_in_specs

tiny_op = pytest.fixture(tiny_in_specs, name="tiny_op")  # the tiny block among the specs, for one test

US = 1e-6



def linear_cost(fixed_us, per_us):
    return lambda b: (fixed_us + per_us * b) * US


# ---------------------------------------------------------------------------------------- percentiles
def test_percentile_is_nearest_rank_and_matches_numpy():
    rng = np.random.default_rng(7)
    compared = 0
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        xs = rng.lognormal(size=n)
        for q in (0, 12.5, 50, 90, 99, 99.9, 100, float(rng.uniform(0, 100))):
            mine = percentile(xs, q)
            # the definition, exactly: the ceil(q/100 * n)-th smallest sample (the first for q = 0)
            rank = max(1, math.ceil(Fraction(str(q)) * n / 100))
            assert mine == np.sort(xs)[rank - 1]
            if (Fraction(str(q)) * n / 100).denominator != 1:  # off numpy's float rounding at whole ranks
                assert mine == np.percentile(xs, q, method="inverted_cdf")
                compared += 1
    assert compared > 1500
    # at a whole rank numpy's float product can land above it: p99.9 of 2000 is the 1998th, not the 1999th
    xs = np.arange(1, 2001, dtype=float)
    assert percentile(xs, 99.9) == 1998.0
    assert percentile(xs, 50) == 1000.0 and percentile(xs, 100) == 2000.0 and percentile(xs, 0) == 1.0
    assert summary(xs) == dict(p50=1000.0, p90=1800.0, p99=1980.0, p999=1998.0, max=2000.0, mean=1000.5)


# ------------------------------------------------------------------------------------------- open loop
def test_known_arrivals_give_known_batches_and_waits():
    """B = 3, D = 100 us, a batch of b takes 50 + 10 b us. By hand, from the clock's start:
    batch 1 opens at 0 (request 0), closes when its third request arrives at 20: {0, 1, 2}, 20 -> 100.
    Request 3 (30) opens the next; it closes at 30 + 100 = 130 (request 4 comes at 200): {3}, 130 -> 190.
    Request 4 (200): closes at 300 (the third would be 500): {4, 5}, 300 -> 370. Request 6 (500): {6},
    600 -> 660. Request 7 (1000): its third request arrives at 1040, before 1100: {7, 8, 9}, 1040 -> 1120.
    Request 10 (1050): closes at 1150, the device free since 1120: {10}, 1150 -> 1210."""
    arrivals = np.array([0, 10, 20, 30, 200, 210, 500, 1000, 1020, 1040, 1050]) * US
    clock = FakeClock(5.0)  # any starting time: arrivals count from the loop's start
    ex = FakeExecutor(clock, linear_cost(50, 10))
    tr = open_loop(ex, clock, arrivals, max_batch=3, max_wait_us=100)
    assert ex.batches == [[0, 1, 2], [3], [4, 5], [6], [7, 8, 9], [10]]
    assert tr.sizes == [3, 1, 2, 1, 3, 1]
    start = np.array([20, 20, 20, 130, 300, 300, 600, 1040, 1040, 1040, 1150])
    end = np.array([100, 100, 100, 190, 370, 370, 660, 1120, 1120, 1120, 1210])
    np.testing.assert_allclose((tr.start - 5.0) / US, start, atol=1e-6)
    np.testing.assert_allclose((tr.end - 5.0) / US, end, atol=1e-6)
    np.testing.assert_allclose(tr.queue / US, start - arrivals / US, atol=1e-6)
    np.testing.assert_allclose(tr.latency / US, end - arrivals / US, atol=1e-6)
    # parts: the fake splits a batch 1/4 h2d, 1/2 compute, 1/4 d2h, so nothing is left for 'other'
    np.testing.assert_allclose(tr.part_per_request("compute") / US, (50 + 10 * np.array(tr.sizes))[tr.batch] / 2)
    np.testing.assert_allclose(tr.part_per_request("other"), 0, atol=1e-12)


def test_a_busy_device_builds_a_queue():
    """B = 2, D = 0, every batch 100 us; arrivals 0, 10, 20, 30. Request 0 goes at once (0 -> 100);
    requests 1 and 2 wait for the device and go together (100 -> 200); request 3 goes at 200."""
    clock = FakeClock()
    ex = FakeExecutor(clock, lambda b: 100 * US)
    tr = open_loop(ex, clock, np.array([0, 10, 20, 30]) * US, max_batch=2, max_wait_us=0)
    assert ex.batches == [[0], [1, 2], [3]]
    np.testing.assert_allclose(tr.queue / US, [0, 90, 80, 170], atol=1e-6)
    np.testing.assert_allclose(tr.latency / US, [100, 190, 180, 270], atol=1e-6)


@pytest.mark.parametrize("max_batch,wait_us,rate", [(1, 0, 2e4), (4, 50, 3e4), (16, 200, 1e5), (8, 1000, 5e3)])
def test_the_batcher_keeps_its_promises(max_batch, wait_us, rate):
    """Random arrivals, random costs: no batch above B; none held past D once the device is free; none
    closed early while it had room and time; every request served once, in order, never before it arrived."""
    rng = np.random.default_rng(max_batch)
    clock = FakeClock()
    ex = FakeExecutor(clock, lambda b: float(rng.uniform(5, 60)) * b ** 0.5 * US)
    arrivals = poisson_arrivals(rate, 3000, seed=max_batch)
    tr = open_loop(ex, clock, arrivals, max_batch, wait_us)
    served = [r for b in ex.batches for r in b]
    assert served == list(range(3000))
    assert max(tr.sizes) <= max_batch and sum(tr.sizes) == 3000
    assert np.all(tr.start >= tr.arrival - 1e-12) and np.all(tr.end > tr.start)
    free = 0.0
    for b in ex.batches:
        first, last, go = tr.arrival[b[0]], tr.arrival[b[-1]], tr.start[b[0]]
        assert go <= max(free, first + wait_us * US) + 1e-12  # waited at most D for a free device
        if len(b) < max_batch:  # closed short: D had passed, and everyone who had arrived came along
            assert go >= first + wait_us * US - 1e-12
            nxt = b[-1] + 1
            assert nxt == len(arrivals) or tr.arrival[nxt] > go
        else:
            assert go >= last - 1e-12
        free = tr.end[b[0]]


# ----------------------------------------------------------------------------------------- closed loop
def test_closed_loop_counts():
    clock = FakeClock()
    ex = FakeExecutor(clock, linear_cost(30, 5))
    tr = closed_loop(ex, clock, 2001)
    assert len(ex.batches) == 2001 and all(len(b) == 1 for b in ex.batches)
    assert len(tr.latency) == 2001 and np.allclose(tr.latency, 35 * US) and np.allclose(tr.queue, 0)
    assert summary(tr.latency)["p999"] == pytest.approx(35 * US)
    ex4 = FakeExecutor(clock, linear_cost(30, 5))
    tr4 = closed_loop(ex4, clock, 2001, batch=4)
    assert [len(b) for b in ex4.batches] == [4] * 500 + [1]
    assert sorted(r for b in ex4.batches for r in b) == list(range(2001))
    assert tr4.throughput(items=3) == pytest.approx(3 * 2001 / (500 * 50 * US + 35 * US))


def test_batch_sweep_stops_at_the_memory_limit():
    clock = FakeClock()

    def make(b):
        if b > 8:
            raise MemoryLimit("too big")
        return FakeExecutor(clock, linear_cost(100, 10))

    sweep = batch_sweep(make, clock, 1024, reps=5)
    assert [r["batch"] for r in sweep] == [1, 2, 4, 8, 16] and not sweep[-1]["fits"]
    for r in sweep[:-1]:
        assert r["requests_per_s"] == pytest.approx(r["batch"] / ((100 + 10 * r["batch"]) * US))
    assert peak_requests_per_s(sweep, 4) == pytest.approx(4 / (140 * US))
    assert batch_sizes(12) == [1, 2, 4, 8, 12] and batch_sizes(1) == [1]


# ----------------------------------------------------------------------------------------------- rows
def test_rows_follow_the_schema_and_load(tmp_path):
    clock = FakeClock()
    base = base_row("tiny_block", "pytorch", "fp32", "T=4,d=16", "20990101T000000Z-test", "pinned", "pytorch")
    rows = trace_rows(closed_loop(FakeExecutor(clock, linear_cost(30, 5)), clock, 50), base, "closed", 4, batch=1)
    for load in (0.1, 0.5):
        ex = FakeExecutor(clock, linear_cost(30, 5))
        tr = open_loop(ex, clock, poisson_arrivals(load * 1e4, 200, seed=1), 8, 100)
        rows += trace_rows(tr, base, "open", 4, batch=8, wait_us=100.0, load=load, rate=load * 1e4)
    sweep = batch_sweep(lambda b: FakeExecutor(clock, linear_cost(30, 5)), clock, 16, reps=3)
    rows += sweep_rows(sweep, base, 4)
    df = pd.DataFrame(rows)
    assert set(data.REQUIRED) <= set(df.columns) and set(df.columns) <= set(data.REQUIRED + data.OPTIONAL)
    assert not df.duplicated([c for c in data.IDENTITY if c in df.columns]).any()
    data.merge_csv(df, tmp_path / "service.csv", data.IDENTITY)
    back = data.load(tmp_path)
    assert len(back) == len(df)
    closed = back[(back["loop"] == "closed") & (back["view"] == "latency")].set_index("stat")["value"]
    assert closed["p50"] == pytest.approx(35) and closed["max"] == pytest.approx(35)
    share = back[(back["loop"] == "open") & (back["view"] == "latency_share") & (back["load"] == 0.5)]
    assert share["value"].sum() == pytest.approx(1.0)  # the parts and the queue make up the latency
    hist = back[(back["view"] == "batch_hist") & (back["load"] == 0.1)]
    served = back[(back["view"] == "requests") & (back["load"] == 0.1)]["value"]
    assert list(served) == [200] and (hist["value"] * hist["batch_size"]).sum() == 200
    assert hist["batch_size"].max() <= 8
    thr = back[(back["loop"] == "batch_sweep") & (back["view"] == "throughput")].sort_values("batch")
    assert list(thr["batch"]) == [1, 2, 4, 8, 16] and thr["value"].is_monotonic_increasing


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("call,arg", [
    (lambda ex, c: open_loop(ex, c, [0.0, 1e-3], max_batch=0, max_wait_us=10), "max_batch"),
    (lambda ex, c: open_loop(ex, c, [0.0, 1e-3], max_batch=2.5, max_wait_us=10), "max_batch"),
    (lambda ex, c: open_loop(ex, c, [0.0, 1e-3], max_batch=4, max_wait_us=-1), "max_wait_us"),
    (lambda ex, c: open_loop(ex, c, [0.0, 1e-3], max_batch=4, max_wait_us=float("nan")), "max_wait_us"),
    (lambda ex, c: open_loop(ex, c, [1e-3, 0.0], max_batch=4, max_wait_us=10), "arrivals"),
    (lambda ex, c: open_loop(ex, c, [], max_batch=4, max_wait_us=10), "arrivals"),
    (lambda ex, c: poisson_arrivals(0, 10), "rate"),
    (lambda ex, c: poisson_arrivals(-5.0, 10), "rate"),
    (lambda ex, c: poisson_arrivals(float("inf"), 10), "rate"),
    (lambda ex, c: closed_loop(ex, c, 0), "requests"),
    (lambda ex, c: closed_loop(ex, c, 10, batch=0), "batch"),
    (lambda ex, c: percentile([], 50), "samples"),
    (lambda ex, c: percentile([1.0], 101), "q"),
])
def test_bad_arguments_name_serve_and_the_argument(call, arg):
    clock = FakeClock()
    with pytest.raises(MageInputError) as e:
        call(FakeExecutor(clock, linear_cost(1, 1)), clock)
    assert e.value.op == "serve" and e.value.arg == arg and f"serve: argument '{arg}'" in str(e.value)


@pytest.mark.parametrize("flags,arg", [(["--batch", "0"], "--batch"), (["--wait-us", "-1"], "--wait-us"),
                                       (["--loads", "0.5", "0"], "--loads"), (["--requests", "0"], "--requests")])
def test_the_command_names_a_bad_flag(tiny_op, tmp_path, capsys, flags, arg):
    assert main(["serve", "--out", str(tmp_path), "--ops", "tiny_block", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mage serve: argument '{arg}'") and "\n" not in err


def test_the_command_refuses_ops_that_do_not_batch(capsys, tmp_path):
    assert main(["serve", "--out", str(tmp_path), "--ops", "layernorm"]) == 2
    assert "layernorm does not say how its requests batch" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_the_command_needs_cuda(tiny_op, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["serve", "--out", str(tmp_path), "--ops", "tiny_block"])
    assert "mage serve: no CUDA device here" in str(e.value.code)
    assert not list(tmp_path.iterdir())  # nothing written
