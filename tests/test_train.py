"""The training step (mage.ext.training.train) on the CPU: which inputs are weights, activations and items, a step
that moves every weight (FP32 and autocast bf16, the weights staying FP32), the rows' round trip through
a data folder beside measurement rows, and bad arguments naming the option."""

import pandas as pd
import pytest
import torch

from mage import ops, registry
from mage.ext.training import paths, train, session as train_session
from mage.data import IDENTITY, load, merge_csv
from tests.support.mage_cli import mage as _mage

TINY = {"mlp_block": dict(T=5, d=8, hidden=12), "trimul_block": dict(N=4, C=6, H=5)}


@pytest.mark.parametrize("name, want", [("mlp_block", (["gamma", "beta", "W1", "b1", "W2", "b2"], "x")),
                                        ("trimul_block", (None, "z")), ("mp_block", (None, "h"))])
def test_weights_and_activations_come_from_the_spec(name, want):
    spec = ops.get(name)
    weights, acts, first = train.roles(spec, spec.shapes["sweep"][0])
    if want[0]:
        assert [spec.args[i] for i in weights] == want[0]
    assert spec.args[first] == want[1] and first in acts and not set(weights) & set(acts)


def test_items_are_the_leading_dimensions():
    assert train.items_per_step(torch.empty(7, 3)) == 7
    assert train.items_per_step(torch.empty(4, 4, 9)) == 16


@pytest.mark.parametrize("name", list(TINY))
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_moves_every_weight_and_keeps_them_fp32(name, precision):
    spec = ops.get(name)
    im = registry.get(name, "pytorch", "fp32")
    step = train.Step(spec, im, paths.train_fn(im), TINY[name], precision, seed=2, device="cpu")
    before = [p.detach().clone() for p in step.params]
    assert step.verify() == ""
    assert all(p.dtype == torch.float32 for p in step.params)
    assert all((p != b).any() for p, b in zip(step.params, before) if p.numel() > 1)
    assert step.args[step.first].grad is not None  # the block's input gets its gradient, as in a network
    assert step.amp == (precision == "bf16")


def test_bf16_mixed_precision_computes_in_bf16():
    spec, shape = ops.get("mlp_block"), dict(T=16, d=64, hidden=128)
    im = registry.get("mlp_block", "pytorch", "fp32")
    outs = {}
    for precision in ("fp32", "bf16"):
        step = train.Step(spec, im, paths.train_fn(im), shape, precision, seed=2, device="cpu")
        with torch.no_grad(), step._autocast():
            outs[precision] = step.fn(*step.args).double()
    err = float((outs["bf16"] - outs["fp32"]).norm() / outs["fp32"].norm())
    assert 1e-4 < err < 5e-2  # bf16's rounding (8 bits), not FP32's, and not a different function


def test_a_path_that_cannot_learn_is_named():
    spec = ops.get("mlp_block")
    im = registry.get("mlp_block", "pytorch", "fp32")
    frozen = lambda x, *w: paths.train_fn(im)(x, *(t.detach() for t in w))  # noqa: E731 - weights get no grad
    step = train.Step(spec, im, frozen, TINY["mlp_block"], "fp32", device="cpu")
    assert "unchanged" in step.verify()


def test_train_rows_load_beside_measurements(tmp_path):
    base = dict(op="mlp_block", impl="pytorch", family="pytorch", dtype="bf16", shape="T=5,d=8,hidden=12",
                shape_set="train", cache="warm", run="20990101T000000Z-x", source="measured", config="{}",
                round=0, stat="mean", **{"pass": "step"})
    rows = [dict(base, view="train_step", value=100.0, unit="us"),
            dict(base, view="throughput", value=5e4, unit="items/s", stage="items per step: 5"),
            dict(base, view="train_part", value=40.0, unit="us", stage="forward"),
            dict(base, view="train_part", value=50.0, unit="us", stage="backward")]
    merge_csv(pd.DataFrame(rows), tmp_path / train_session.FILE, IDENTITY)
    pd.DataFrame([dict(base, shape_set="field", view="kernel_time", value=3.0, unit="us", **{"pass": ""})]).to_csv(
        tmp_path / "field.csv", index=False)
    df = load(tmp_path)
    assert sorted(df["pass"]) == ["forward"] + ["step"] * 4
    text = train_session.summary(rows)
    assert "train_step" in text and "part:backward" in text and "throughput" in text


def test_bad_arguments_name_the_option(tmp_path):
    r = _mage("train", "--out", str(tmp_path), "--ops", "matmul")
    assert r.returncode == 2 and "--ops" in r.stderr and "mlp_block" in r.stderr
    r = _mage("train", "--out", str(tmp_path), "--precisions", "fp16")
    assert r.returncode == 2 and "--precisions" in r.stderr
    r = _mage("train", "--out", str(tmp_path), "--steps", "0")
    assert r.returncode == 2 and "--steps" in r.stderr


def test_a_case_writes_every_view_and_they_load(tmp_path):
    """The session's case on the CPU, the GPU's profile and event timer faked: steps per round and over
    all rounds, items per second, the three parts, kernel time and launches; then read back."""
    from mage.env import clock_warnings
    from mage.profile import Profile
    from mage.timing import SpanPlan, spans

    class Timer:
        last_host_us = 2.0

        def __call__(self, fn):
            fn()
            return 50.0

    def profile(fn, iters=20):
        fn()
        return Profile(iters=iters, kernel_us=30.0, copy_us=0.0, launches=12.0, kernel_names=["k"])

    fake_spans = lambda calls, plan, between: spans(calls, plan=plan, timer=Timer(), between=between)  # noqa: E731
    spec = ops.get("mlp_block")
    rows = train_session._case(spec, TINY["mlp_block"], "field", "bf16", ["pytorch"], SpanPlan.make(6, 3, 2, warmup=1),
                       5, 0, "20990101T000000Z-x", print, profile, fake_spans, lambda: {}, clock_warnings, device="cpu")
    df = pd.DataFrame(rows)
    top = df[(df["round"] == 0) & (df["stat"] == "mean")].fillna({"stage": ""}).set_index(["view", "stage"])["value"]
    assert top[("train_step", "")] == 50.0 and top[("kernel_time", "")] == 30.0
    assert top[("throughput", "items per step: 5")] == pytest.approx(5 / 50e-6)
    assert {s for v, s in top.index if v == "train_part"} == {"forward", "backward", "optimizer"}
    assert sorted(df[df["view"] == "train_step"]["round"].unique()) == [0, 1, 2, 3]
    assert set(df["pass"]) == {"step"} and set(df["dtype"]) == {"bf16"} and set(df["shape_set"]) == {"train"}
    assert '"compute": "autocast bf16"' in df["config"][0] and '"shapes": "field"' in df["config"][0]
    merge_csv(df, tmp_path / train_session.FILE, IDENTITY)
    assert len(load(tmp_path)) == len(df)


def test_a_path_that_ignores_autocast_gets_no_bf16_row():
    # a torch.library operator with no autocast rule keeps computing in FP32 under torch.autocast: a bf16
    # training row of it would be an FP32 one with the wrong label
    from mage import registry
    from mage.registry import Impl
    op = "mlp_block"
    plain = Impl(op=op, name="custom_x", fn=lambda *a: None, family="triton")
    aware = Impl(op=op, name="custom_y", fn=lambda *a: None, family="triton")
    try:
        paths.differentiable(op, "custom_x")(lambda *a: None)
        paths.differentiable(op, "custom_y", autocast=True)(lambda *a: None)
        assert not paths.follows_autocast(plain) and paths.follows_autocast(aware)
        assert paths.follows_autocast(registry.get(op, "pytorch"))  # PyTorch columns follow it
    finally:
        for k in ((op, "custom_x", "fp32"), (op, "custom_y", "fp32")):
            registry.declared("train").pop(k, None)


def test_a_blocks_roles_are_worked_out_once():
    # The H200 run spent 37 s per column preparing the message-passing block: each Step rebuilt the size
    # sweep's two graphs on the CPU to tell weights from activations.
    import dataclasses
    real = ops.get("mlp_block")
    calls = []
    spec = dataclasses.replace(real, make_inputs=lambda *a, **k: calls.append(1) or real.make_inputs(*a, **k))
    first = train.roles(spec, spec.shapes["sweep"][0])
    assert train.roles(spec, spec.shapes["field"][0]) == first and len(calls) == 2


PLAIN = {"triton_graphs": "triton", "pytorch_graphs": "pytorch"}  # each graphed column and what it replays


def test_the_graphed_columns_are_registered_to_train_as_one_graph():
    registry.load()
    for name in ("mlp_block", "trimul_block", "mp_block"):
        for g, p in PLAIN.items():
            graphed, plain = registry.get(name, g, "fp32"), registry.get(name, p, "fp32")
            assert paths.step_graphed(graphed) and not paths.step_graphed(plain)
            assert paths.follows_autocast(graphed) and graphed.family == plain.family
            assert paths.train_fn(registry.get(name, g, "bf16")) is None  # its bf16 forward is a graph
        # the same path, only replayed (eager's path is its forward expression)
        assert paths.train_fn(registry.get(name, "triton_graphs", "fp32")) is \
            paths.train_fn(registry.get(name, "triton", "fp32"))


def test_a_graphed_step_on_the_cpu_runs_eagerly():
    spec, im = ops.get("mlp_block"), registry.get("mlp_block", "pytorch", "fp32")
    step = train.Step(spec, im, paths.train_fn(im), TINY["mlp_block"], "fp32", seed=2, device="cpu",
                      graphed=True)
    assert not step.graphed and step.verify() == ""


GPU_SHAPES = {"mlp_block": dict(T=37, d=64, hidden=96), "trimul_block": dict(N=19, C=32, H=16),
              "mp_block": dict(n=700, F=32, H=48, deg=12)}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(GPU_SHAPES))
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("column", list(PLAIN))
def test_gpu_a_replayed_step_trains_as_the_eager_step_does(name, precision, column):
    """The graph's replays are real steps: after 4 and then 7 steps the weights match the plain column's
    (the same kernels; AdamW's capturable form reads its step count from the device)."""
    registry.load()
    spec, shape = ops.get(name), GPU_SHAPES[name]
    im, gim = registry.get(name, PLAIN[column], "fp32"), registry.get(name, column, "fp32")
    eager = train.Step(spec, im, paths.train_fn(im), shape, precision, seed=5)
    graphed = train.Step(spec, gim, paths.train_fn(gim), shape, precision, seed=5,
                         graphed=paths.step_graphed(gim))
    assert graphed.graphed
    graphed()  # three eager steps on a side stream, the capture, one replay: four steps
    for _ in range(4):
        eager()
    for rounds in (0, 3):
        for _ in range(rounds):
            graphed(), eager()
        torch.cuda.synchronize()
        for a, b in zip(graphed.params, eager.params):
            assert torch.isfinite(a).all()
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (name, precision, rounds, float((a - b).abs().max()))
