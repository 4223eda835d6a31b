"""The service experiment's executor and session (mage.ext.service.gpu, mage.ext.service.session): each
request's inputs moved on the host and its output back in its slice, a batch axis that is not the
first, resident arguments built per batch size, the whole session's rows loading through mage.data (all
on the CPU), and (on a GPU) the executor on the tiny block of tests/support/service_tiny.py. The loops and
statistics are tests/test_service.py's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mage import data, facets
from mage.errors import MageInputError
from mage.ext.service.batching import Batching
from mage.ext.service.loops import closed_loop, open_loop, poisson_arrivals

from tests.support.service_tiny import TINY, tiny_in_specs

tiny_op = pytest.fixture(tiny_in_specs, name="tiny_op")  # the tiny block among the specs, for one test



# ------------------------------------------------------------------------------------------ executor
# The same block with its tokens along the last axis (x: [d, T], y = W^T x), to test a batch axis that
# is not the first.
TINY_T = dataclasses.replace(
    TINY, name="tiny_block_t",
    make_inputs=lambda s, gen, device, dtype, dist: tuple(
        t.T.contiguous() if i == 0 else t for i, t in enumerate(TINY.make_inputs(s, gen, device, dtype, dist))),
    reference=lambda x, w: w.double().T @ x.double(), validate=lambda x, w: None,
    out_spec=lambda x, w: ((w.shape[1], x.shape[1]), x.dtype))
facets.declare(TINY_T.name, batch=Batching(size="T", axes={"x": 1}, out_axis=1, items=3))


@pytest.mark.parametrize("spec,fn", [(TINY, lambda x, w, out=None: x @ w),
                                     (TINY_T, lambda x, w, out=None: w.T @ x)])
def test_the_executor_moves_each_request_on_the_host(spec, fn):
    """The executor's slices, padding and outputs, on the CPU with host-clock events: every request of
    a batch gets its own inputs' output back, in its slice of the host buffer."""
    from mage.ext.service.gpu import CudaExecutor
    from mage.ext.service.loops import WallClock
    from mage.registry import Impl
    impl = Impl(op=spec.name, name="mm", fn=fn, dtype="fp32", needs_cuda=False)
    batching = facets.get(spec, "batch")
    items, ax = batching.items, batching.out_axis
    ex = CudaExecutor(spec, impl, dict(T=1, d=7), items, batch=5, host_mem="pageable", pool=4, device="cpu")
    assert ex.sizes == [1, 2, 4, 5]
    ex.warm(calls=1)
    assert ex.verify(spec) <= spec.tol("fp32")
    for requests in ([0], [3, 1, 2], [0, 1, 2, 3, 4], [6, 5]):  # 3 requests run padded to 4; 6 is 2 again
        parts = ex.run(requests)
        # the three parts, and the host's own time in the call beside them (it overlaps 'compute')
        assert set(parts) == {"h2d", "compute", "d2h", "host_call"} and all(v >= 0 for v in parts.values())
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
    out_spec=lambda x, s, w: ((x.shape[0], w.shape[1]), x.dtype))
facets.declare(TINY_R.name, batch=Batching(size="T", axes={"x": 0}, items=2, resident=("s",)))


def test_resident_arguments_are_built_per_batch_size_and_never_sent():
    from mage.ext.service.gpu import CudaExecutor
    from mage.registry import Impl
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
    from mage.ext.service.gpu import CudaExecutor
    from mage.registry import Impl
    from mage.ext.service.gpu import CudaExecutor
    bad = dataclasses.replace(TINY, name="tiny_bad")
    facets.declare(bad.name, batch=Batching(size="d", axes={"x": 0}))
    with pytest.raises(MageInputError) as e:
        CudaExecutor(bad, Impl(op="tiny_bad", name="mm", fn=None), dict(T=3, d=2), 1, batch=2, device="cpu",
                     host_mem="pageable")
    assert e.value.op == "tiny_bad" and e.value.arg == "batch" and "along axis 0" in str(e.value)


def test_the_session_writes_rows_that_load(tiny_op, tmp_path):
    """The whole session (closed loop, batch sweep, open loop at two loads) on the host: rows of the
    tiny block land in service.csv with the run's environment, and load back through mage.data."""
    from mage import registry
    from mage.ext.service.session import FILE, measure
    from mage.registry import Impl
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
    # the host's time inside the call: its own view for the closed and open loops, never a part
    call = df[df["view"] == "host_call"]
    assert set(call["loop"]) == {"closed", "open"} and set(call["stat"]) == {"mean", "p50", "p99"}
    assert (call["value"] >= 0).all() and (call["unit"] == "us").all()
    assert "host_call" not in set(df[df["view"].isin(["latency_part", "latency_share"])]["stage"])
    latest = data.load(tmp_path)  # each case from its latest run: run2 re-measured fp32's closed loop
    closed = latest[(latest["loop"] == "closed") & (latest["view"] == "requests")]
    assert dict(zip(closed["dtype"], closed["run"])) == {"fp32": run2, "bf16": run}


# ----------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("host_mem", ["pinned", "pageable"])
def test_the_cuda_executor_serves_requests(dtype, host_mem):
    from mage.ext.service.gpu import CudaExecutor
    from mage.ext.service.loops import WallClock
    from mage.registry import Impl
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
