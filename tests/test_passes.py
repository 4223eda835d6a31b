"""The pass dimension (issue 16) on the CPU: the backward and both calls, the gradient check, the
harness's rows for each pass (the one loop, with the GPU's profile, spans, streams and graph replay faked), their
round trip through the data folder, old data without the column, and bad arguments naming the option."""
import contextlib

import pandas as pd
import pytest
import torch

from mage import hooks, measure, ops, registry
from mage.ext.training import passes, paths
from mage.data import DataError, load, merge_csv
from mage.errors import MageInputError
from mage.profile import Profile
from mage.timing import spans as real_spans
from tests.support.mage_cli import mage

SHAPE = dict(R=5, C=7)


def _layernorm():
    return registry.get("layernorm", "pytorch", "fp32")


def test_backward_is_the_gradient_alone_and_both_runs_the_forward_too():
    calls = {"n": 0}

    def fn(x, w):
        calls["n"] += 1
        return x * w

    x, w = torch.randn(4, 3), torch.randn(3)
    b = passes.PassSet(fn, (x, w), "backward", seed=1)
    assert calls["n"] == 1  # the forward, once, outside anything timed
    gx, gw = b()
    gx2, _ = b()  # the graph is kept: the same backward again
    assert calls["n"] == 1 and torch.equal(gx, gx2)
    assert torch.allclose(gx, b.g * w) and torch.allclose(gw, (b.g * x).sum(0))
    both = passes.PassSet(fn, (x, w), "both", seed=1)
    n = calls["n"]
    gx3, _ = both()
    assert calls["n"] == n + 1 and torch.allclose(gx3, gx)


def test_an_output_without_a_gradient_is_refused():
    with pytest.raises(MageInputError, match="pass"):
        passes.PassSet(lambda x: x.detach() * 2, (torch.randn(3),), "backward", seed=0)


def test_grad_check_passes_pytorch_and_catches_a_wrong_gradient():
    im = _layernorm()
    assert passes.grad_check(im, paths.train_fn(im), SHAPE, seed=3, device="cpu").passed

    class Wrong(torch.autograd.Function):  # the right forward, a gradient twice too large
        @staticmethod
        def forward(ctx, x, g, b):
            ctx.save_for_backward(x, g, b)
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5)

        @staticmethod
        def backward(ctx, dy):
            x, g, b = (t.detach().requires_grad_() for t in ctx.saved_tensors)
            with torch.enable_grad():
                y = torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5)
            return tuple(2 * t for t in torch.autograd.grad(y, (x, g, b), dy))

    c = passes.grad_check(im, Wrong.apply, SHAPE, seed=3, device="cpu")
    assert not c.passed and c.dist == "grad" and "gradient of" in c.reason


def test_passes_are_checked_and_ordered():
    assert hooks.check_passes(["both", "forward"]) == ("forward", "both")
    assert hooks.check_passes(None) == ("forward",)
    with pytest.raises(MageInputError, match="--passes"):
        hooks.check_passes(["sideways"])


def test_the_cli_names_the_option():
    r = mage("measure", "--out", "x", "--passes", "sideways")
    assert r.returncode == 2 and "--passes" in r.stderr


@pytest.fixture
def fake_gpu(monkeypatch):
    """The harness's GPU parts replaced: a profile of fixed numbers, spans from a host clock, a graph
    replay that fails for backward (as capture of a backward may) and works for the forward."""
    def profile(fn, iters=100):
        for _ in range(3):
            fn()
        return Profile(iters=iters, kernel_us=5.0, copy_us=0.0, launches=2.0, kernel_names=["k"])

    def graph_span(calls, replays=20, repeat=10, stream=None):
        for c in calls:
            if isinstance(c, passes.PassSet) and c.pass_ == "backward":
                raise RuntimeError("operation not permitted when stream is capturing")
        return 1.0  # both: less than half the kernel time, so the harness refuses it as missed work

    class Stream:  # the backward's capture stream, on the host
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())

    class Timer:
        last_host_us = 1.0

        def __call__(self, fn):
            fn()
            return 7.0

    monkeypatch.setattr(measure, "profile", profile)
    monkeypatch.setattr(passes, "graph_span", graph_span)
    monkeypatch.setattr(hooks, "graph_span", graph_span)  # the forward pass replays through the core
    monkeypatch.setattr(measure, "spans", lambda calls, plan, between: real_spans(calls, plan=plan, timer=Timer(),
                                                                                  between=between))
    monkeypatch.setattr(measure, "clocks", lambda: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def _rows(pass_, run="r1"):
    im = _layernorm()
    spec = ops.get("layernorm")
    st = measure.Settings(iters=3, spans=6, rounds=3, block=2, warmup=1, warm_s=0.0, run=run, passes=(pass_,))
    inputs = ops.get("layernorm").inputs(SHAPE, seed=1)
    base = dict(op="layernorm", dtype="fp32", shape="R=5,C=7", shape_set="field", cache="warm", run=run,
                source="measured")
    row = measure._row_maker(base, SHAPE, pass_, passes.pass_cost(ops.get("layernorm"), SHAPE, "fp32",
                                                                   inputs, pass_), {})
    logged = []
    rows, _ = measure._time_pass(spec, "R=5,C=7", pass_, [im], {im.name: ([inputs], 0.1)}, st, row, logged.append)
    return rows, logged


def test_each_pass_writes_its_rows_and_they_read_back(fake_gpu, tmp_path):
    fwd, _ = _rows("forward")
    bwd, logged = _rows("backward")
    both, _ = _rows("both")
    assert {r["pass"] for r in fwd} == {"forward"} and {r["pass"] for r in bwd} == {"backward"}
    views = lambda rows: {r["view"] for r in rows}  # noqa: E731
    assert {"kernel_time", "launches", "event_span", "graph_span", "prepare_time"} <= views(fwd)
    # backward could not be captured: no graph row, and the kernel-time row says why
    assert "graph_span" not in views(bwd) and any("graph capture failed" in m for m in logged)
    kt = [r for r in bwd if r["view"] == "kernel_time"][0]
    assert "no_graph:RuntimeError" in kt["flags"]
    # a replay faster than half the kernel time missed the work: refused, not recorded
    assert "graph_span" not in views(both) and "no_graph" in [r for r in both if r["view"] == "kernel_time"][0]["flags"]
    measure.write(tmp_path, pd.DataFrame(fwd + bwd + both), pd.DataFrame())
    df = load(tmp_path)
    assert set(df["pass"]) == {"forward", "backward", "both"}
    one = df[(df["view"] == "event_span") & (df["round"] == 0) & (df["stat"] == "mean")]
    assert len(one) == 3 and set(one["value"]) == {7.0}


def test_old_data_without_the_column_reads_as_forward(tmp_path):
    old = pd.DataFrame([dict(op="layernorm", impl="pytorch", dtype="fp32", shape="R=5,C=7", shape_set="field",
                             cache="warm", view="kernel_time", round=0, stat="mean", value=3.0, unit="us", run="r0")])
    old.to_csv(tmp_path / "field.csv", index=False)
    assert list(load(tmp_path)["pass"]) == ["forward"]
    new = old.assign(run="r1", value=4.0, **{"pass": "backward"})
    merge_csv(new, tmp_path / "field.csv", measure.KEY)
    df = load(tmp_path)  # the old forward row is kept beside the new run's backward row, not replaced
    assert sorted(zip(df["pass"], df["value"])) == [("backward", 4.0), ("forward", 3.0)]
    bad = pd.read_csv(tmp_path / "field.csv").assign(**{"pass": "sideways"})
    bad.to_csv(tmp_path / "field.csv", index=False)
    with pytest.raises(DataError, match="row 2: unknown pass 'sideways'"):
        load(tmp_path)


def test_a_measured_backward_turns_off_buffer_donation_before_compiling():
    # The H200 run failed torch.compile's backward-alone rows: a backward compiled with donated buffers
    # refuses to walk its graph twice, which the backward pass does. The config's own patch restores it
    # (pytest's monkeypatch deletes the entry on undo, which hides it from every later compile).
    import torch._functorch.config as functorch_config
    with functorch_config.patch(donated_buffer=True):
        passes.allow_repeated_backward(("forward",))
        assert functorch_config.donated_buffer is True  # forward alone: compiled columns as they ship
        passes.allow_repeated_backward(("forward", "backward"))
        assert functorch_config.donated_buffer is False
