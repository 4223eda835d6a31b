"""The service experiment (mage.service, mage.service_stats, mage.service_gpu): the loops with a fake clock
and a fake executor (known arrivals give known waits and batches, worked out by hand below), the
batcher's promises on random arrivals, nearest-rank percentiles against numpy, the rows in the data
schema, bad arguments, and (on a GPU) the executor on a tiny block defined here."""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch

from mage import data, ops
from mage.__main__ import main
from mage.errors import MageInputError
from mage.ops import Batching, Op
from mage.service import (FakeClock, FakeExecutor, MemoryLimit, batch_sizes, batch_sweep, closed_loop,
                          open_loop, poisson_arrivals)
from mage.service_stats import base_row, percentile, peak_requests_per_s, summary, sweep_rows, trace_rows

US = 1e-6


# ------------------------------------------------------------------------------- a tiny block, here only
def _validate(x, w):
    ops.tensor("tiny_block", "x", x, ops.FLOAT, 2)
    ops.tensor("tiny_block", "w", w, ops.FLOAT, 2)
    ops.dim("tiny_block", "w", w, 0, x.shape[1], "d, the channels of x")


TINY = Op(
    name="tiny_block", label="tiny block", args=("x", "w"), equation=r"y = x W", kind="block", order=199,
    make_inputs=lambda s, gen, device, dtype, dist: (
        ops.randn((s["T"], s["d"]), gen, device, dist).to(ops.TORCH_DTYPE[dtype]),
        (ops.randn((s["d"], s["d"]), gen, device, "normal") / math.sqrt(s["d"])).to(ops.TORCH_DTYPE[dtype])),
    reference=lambda x, w: x.double() @ w.double(), validate=_validate,
    out_spec=lambda x, w: ((x.shape[0], w.shape[1]), x.dtype),
    flops=lambda s: 2 * s["T"] * s["d"] ** 2, bytes=lambda s, isz=4: isz * (2 * s["T"] * s["d"] + s["d"] ** 2),
    shapes={"field": [dict(T=8, d=16)], "large": [dict(T=64, d=64)], "sweep": [dict(T=8, d=16), dict(T=32, d=16)]},
    awkward=[dict(T=1, d=3)], random_shape=lambda rnd: dict(T=rnd.randint(1, 9), d=rnd.randint(1, 9)),
    dtypes=("fp32", "bf16"), batch=Batching(size="T", axes={"x": 0}, out_axis=0, items=4),
)


@pytest.fixture
def tiny_op():
    """The tiny block among the specs for one test, then gone (other tests see the five operations)."""
    ops.OPS.add(TINY)
    yield TINY
    dict.pop(ops.OPS, TINY.name, None)


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


# ------------------------------------------------------------------------------------------ executor
# The same block with its tokens along the last axis (x: [d, T], y = W^T x), to test a batch axis that
# is not the first.
TINY_T = dataclasses.replace(
    TINY, name="tiny_block_t",
    make_inputs=lambda s, gen, device, dtype, dist: tuple(
        t.T.contiguous() if i == 0 else t for i, t in enumerate(TINY.make_inputs(s, gen, device, dtype, dist))),
    reference=lambda x, w: w.double().T @ x.double(), validate=lambda x, w: None,
    out_spec=lambda x, w: ((w.shape[1], x.shape[1]), x.dtype),
    batch=Batching(size="T", axes={"x": 1}, out_axis=1, items=3))


@pytest.mark.parametrize("spec,fn", [(TINY, lambda x, w, out=None: x @ w),
                                     (TINY_T, lambda x, w, out=None: w.T @ x)])
def test_the_executor_moves_each_request_on_the_host(spec, fn):
    """The executor's slices, padding and outputs, on the CPU with host-clock events: every request of
    a batch gets its own inputs' output back, in its slice of the host buffer."""
    from mage.registry import Impl
    from mage.service import WallClock
    from mage.service_gpu import CudaExecutor
    impl = Impl(op=spec.name, name="mm", fn=fn, dtype="fp32", needs_cuda=False)
    items, ax = spec.batch.items, spec.batch.out_axis
    ex = CudaExecutor(spec, impl, dict(T=1, d=7), items, batch=5, host_mem="pageable", pool=4, device="cpu")
    assert ex.sizes == [1, 2, 4, 5]
    ex.warm(calls=1)
    assert ex.verify(spec) <= spec.tol("fp32")
    for requests in ([0], [3, 1, 2], [0, 1, 2, 3, 4], [6, 5]):  # 3 requests run padded to 4; 6 is 2 again
        parts = ex.run(requests)
        assert set(parts) == {"h2d", "compute", "d2h"} and all(v >= 0 for v in parts.values())
        for j, r in enumerate(requests):
            got = ex.host_out.narrow(ax, j * items, items).double()
            want = spec.reference(ex.pool[r % 4][0], ex.dev[1])
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (requests, r)
    tr = open_loop(ex, WallClock(), poisson_arrivals(1e4, 100, seed=3), 5, 20)
    assert sum(tr.sizes) == 100 and max(tr.sizes) <= 5


# A block with a resident argument: s [T] grows with the batch but stays on the device (as a graph's
# structure would), y = (s * x) W.
TINY_R = dataclasses.replace(
    TINY, name="tiny_block_r", args=("x", "s", "w"),
    make_inputs=lambda sh, gen, device, dtype, dist: (lambda x, w: (
        x, 1.0 + torch.arange(sh["T"], device=device, dtype=x.dtype) / 8, w))(*TINY.make_inputs(sh, gen, device,
                                                                                              dtype, dist)),
    reference=lambda x, s, w: (s.double()[:, None] * x.double()) @ w.double(), validate=lambda *a: None,
    out_spec=lambda x, s, w: ((x.shape[0], w.shape[1]), x.dtype),
    batch=Batching(size="T", axes={"x": 0}, items=2, resident=("s",)))


def test_resident_arguments_are_built_per_batch_size_and_never_sent():
    from mage.registry import Impl
    from mage.service_gpu import CudaExecutor
    impl = Impl(op=TINY_R.name, name="mm", fn=lambda x, s, w, out=None: (s[:, None] * x) @ w, dtype="fp32")
    ex = CudaExecutor(TINY_R, impl, dict(T=1, d=5), 2, batch=4, host_mem="pageable", pool=3, device="cpu")
    ex.warm(calls=1)
    assert ex.verify(TINY_R) <= TINY_R.tol("fp32")
    assert sorted(ex._resident_at) == [1, 2, 4] and all(len(r[1]) == 2 * n for n, r in ex._resident_at.items())
    assert all(set(p) == {0} for p in ex.pool)  # a request carries x only
    ex.run([2, 0, 1])  # padded to 4: s of the batch of four
    s4 = ex._resident_at[4][1].double()
    for j, r in enumerate([2, 0, 1]):
        want = (s4[2 * j:2 * j + 2, None] * ex.pool[r][0].double()) @ ex.dev[2].double()
        assert torch.allclose(ex.host_out[2 * j:2 * j + 2].double(), want, rtol=1e-5, atol=1e-5)


def test_a_spec_whose_batching_does_not_fit_its_inputs_is_refused():
    from mage.registry import Impl
    from mage.service_gpu import CudaExecutor
    bad = dataclasses.replace(TINY, name="tiny_bad", batch=Batching(size="d", axes={"x": 0}))
    with pytest.raises(MageInputError) as e:
        CudaExecutor(bad, Impl(op="tiny_bad", name="mm", fn=None), dict(T=3, d=2), 1, batch=2, device="cpu",
                     host_mem="pageable")
    assert e.value.op == "tiny_bad" and e.value.arg == "batch" and "along axis 0" in str(e.value)


def test_the_session_writes_rows_that_load(tiny_op, tmp_path):
    """The whole session (closed loop, batch sweep, open loop at two loads) on the host: rows of the
    tiny block land in service.csv with the run's environment, and load back through mage.data."""
    from mage import registry
    from mage.registry import Impl
    from mage.service_gpu import FILE, measure
    impls = [registry.add(Impl(op="tiny_block", name="mm", fn=lambda x, w, out=None: x @ w, dtype=dt,
                               family="pytorch", needs_cuda=False)) for dt in ("fp32", "bf16")]
    try:
        run, rows = measure(tmp_path, ["tiny_block"], ["mm"], shape_set="sweep", host_mems=("pageable",),
                            requests=60, max_batch=4, wait_us=50, loads=(0.2, 0.8), sweep_limit=8, reps=2,
                            pin=False, log=lambda m: None, device="cpu")
        # a second run into the same folder: its rows sit beside the first run's
        run2, _ = measure(tmp_path, ["tiny_block"], ["mm"], dtypes=["fp32"], host_mems=("pageable",), requests=20,
                          max_batch=2, wait_us=0, loads=(0.5,), sweep_limit=2, reps=1, pin=False, log=lambda m: None,
                          device="cpu")
    finally:
        for im in impls:
            registry._REGISTRY.pop(im.key)
    assert (tmp_path / FILE).exists() and {run, run2} <= set(data.load_environment(tmp_path))
    df = data.load(tmp_path, run=run)
    assert len(df) == len(rows) and set(df["loop"]) == {"closed", "batch_sweep", "open"}
    assert set(df["dtype"]) == {"fp32", "bf16"}
    assert set(df["shape"]) == {"T=4,d=16"} and set(df["shape_set"]) == {"service"}
    assert sorted(df[df["loop"] == "batch_sweep"]["batch"].unique()) == [1, 2, 4, 8]
    assert sorted(df[df["loop"] == "open"]["load"].unique()) == [0.2, 0.8]
    served = df[df["view"] == "requests"]
    assert (served["value"] == 60).all() and len(served) == 6  # three loops, two precisions
    latest = data.load(tmp_path)  # each case from its latest run: run2 re-measured fp32's closed loop
    closed = latest[(latest["loop"] == "closed") & (latest["view"] == "requests")]
    assert dict(zip(closed["dtype"], closed["run"])) == {"fp32": run2, "bf16": run}


# ----------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("host_mem", ["pinned", "pageable"])
def test_the_cuda_executor_serves_requests(dtype, host_mem):
    from mage.registry import Impl
    from mage.service import WallClock
    from mage.service_gpu import CudaExecutor
    impl = Impl(op="tiny_block", name="mm", fn=lambda x, w, out=None: x @ w, dtype=dtype)
    rng = np.random.default_rng(0)
    for _ in range(30):  # random request shapes and batcher limits
        shape, items, batch = dict(T=1, d=int(rng.integers(1, 300))), int(rng.integers(1, 40)), int(rng.integers(1, 9))
        ex = CudaExecutor(TINY, impl, shape, items, batch, host_mem, pool=5)
        ex.warm(calls=1)
        assert ex.verify(TINY) <= TINY.tol(dtype)
        clock = WallClock()
        tr = closed_loop(ex, clock, 20)
        assert np.all(tr.latency > 0) and np.all(tr.part_per_request("compute") > 0)
        tr = open_loop(ex, clock, poisson_arrivals(2e4, 50, seed=1), batch, 50)
        assert max(tr.sizes) <= batch and sum(tr.sizes) == 50
        # the last batch's outputs in host memory are its requests' products
        last = [r for r in range(50) if tr.batch[r] == len(tr.sizes) - 1]
        for j, r in enumerate(last):
            x = ex.pool[r % len(ex.pool)][0].double()
            got = ex.host_out[j * items:(j + 1) * items].double()
            ref = x @ ex.dev[1].cpu().double()
            assert float((got - ref).norm() / ref.norm().clamp_min(1e-30)) <= TINY.tol(dtype)
