"""The task form's Triton column (kernels/trimul_gpumode/triton_block.py): under the interpreter at the
awkward and small random shapes with normal and heavy-tailed inputs, both precisions and every sweep
config; the task's own elementwise verdict at fp32; bad inputs refused by name on every entry point;
the launches a call makes; on a GPU, random shapes and the contest's verdict at its shapes."""
from __future__ import annotations

import math

import pytest
import torch

import mage
from kernels._triton import common
from kernels.trimul_gpumode import pytorch_impl
from kernels.trimul_gpumode import triton_block as tg
from kernels.trimul_gpumode.spec import ARGS, CONTEST, NAME, SPEC, contest_failures
from mage import registry
from mage.check import check
from mage.check import describe_mismatch, outside
from tests.support.kernel_checks import Counted, Keywords, assert_refuses, check_shapes, cpu_only, gpu, rel_err


def _impl(dtype="fp32"):
    return registry.get(NAME, "triton", dtype)


def test_registered_at_both_precisions_with_a_config_for_every_contest_shape():
    for dtype in ("fp32", "bf16"):
        impl = _impl(dtype)
        assert impl.prepare is not None and impl.sweep
        for s in CONTEST:  # every contest shape has N >= 256: at fp32 the contraction runs tf32x3 there
            name = ("gated_x3_tma_128x128x64_w8_s3" if dtype == "fp32" else  # bf16: the fused road where D == H
                    "fused_ab_g64_cublas" if s["D"] == s["H"] else tg.TILES[dtype].base)
            want = tg.TILES[dtype][name]
            assert impl.config_at(s) == want, (dtype, s)
            assert want["CONTRACT"] == ("tf32x3" if dtype == "fp32" else "ieee")


@cpu_only
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_awkward_and_random_shapes(dtype, dist):
    # random shapes capped in N: the interpreter runs N^2 programs one after another
    small = [dict(s, N=min(s["N"], 12)) for s in SPEC.random_shapes(3, seed=1)]
    check_shapes(_impl(dtype), SPEC.awkward + small, dist)


@cpu_only
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_every_sweep_config(dtype):
    for cfg in _impl(dtype).sweep:  # 'permute' and 'direct' contraction epilogues, the GEMMs' tiles, the fused road
        v = _impl(dtype).variant(**cfg)
        shape = dict(B=2, N=5, D=7, H=17)
        r = check(v, shape if not v.limits(shape) else dict(shape, D=17), trials=1, device="cpu")  # fused: D == H
        assert r.passed, (cfg, r.reason)


@cpu_only
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_the_contest_verdict_at_fp32(dist):
    """The task's verdict: every element within rtol = atol = 2e-2 of the FP32 reference (the module
    in FP32, TF32 off), at a small shape with the contest's H : D proportions and a mask."""
    for s in (dict(B=2, N=8, D=32, H=16), dict(B=1, N=10, D=48, H=16, nomask=1)):
        inputs = SPEC.inputs(s, seed=11, dist=dist)
        got = tg.trimul_gpumode(*inputs)
        assert contest_failures(got, pytorch_impl.expression(*inputs)) == 0, s
        assert rel_err(got, SPEC.reference(*inputs)) < SPEC.tol("fp32"), s


GATED = [n for n in tg.TILES["fp32"].configs if tg.TILES["fp32"][n]["GEMM"] == "hopper_gated"]


@cpu_only
@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_the_gated_first_gemm_agrees_with_float64(name, dist, poisoned, monkeypatch):
    # GEMM 'hopper_gated' (the interpreter runs the Hopper kernels): a, b and the out gate's H columns from the first
    # GEMM's epilogue, once a complex, the gate kernel never; the task's weights reordered from Linear's layout
    from kernels.trimul_block import _gated_in
    calls, gates = [], []
    monkeypatch.setattr(_gated_in, "_gated_in_kernel", Counted(_gated_in._gated_in_kernel, calls))
    monkeypatch.setattr(tg.af3, "_gate_kernel", Counted(tg.af3._gate_kernel, gates))
    cfg = tg.TILES["fp32"][name]
    for s in (dict(B=2, N=6, D=24, H=16), dict(B=1, N=9, D=40, H=32, nomask=1)):
        inputs = SPEC.inputs(s, seed=5, dist=dist)
        got, want = tg.trimul_gpumode(*inputs, **cfg), SPEC.reference(*inputs)
        assert rel_err(got, want) < SPEC.tol("fp32"), (s, rel_err(got, want))
        assert not outside(got, want, "fp32").any(), describe_mismatch(got, want, "fp32")
        assert contest_failures(got, pytorch_impl.expression(*inputs)) == 0, s
    assert len(calls) == 3 and not gates
    assert tg.launches(cfg) == tg.launches(dict(cfg, GEMM="fused")) - 1  # the gate kernel's launch is gone


FUSED = tg.TILES["bf16"]["fused_ab_g64_cublas"]


@cpu_only
@pytest.mark.parametrize("dtype", ("bf16", "fp32"))
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_the_fused_road_computes_the_task_form(dtype, dist, poisoned, monkeypatch):
    # ROAD='fused' (the AlphaFold column's three launches) where D == H, the gate before the output projection: the
    # task's float64 reference, elementwise and norm-wise; its first and last kernels are the ones that ran
    from kernels.trimul_block import _fused
    first, last = [], []
    monkeypatch.setattr(_fused, "_in_kernel", Keywords(_fused._in_kernel, first))
    monkeypatch.setattr(_fused, "_out_kernel", Keywords(_fused._out_kernel, last))
    for s in (dict(B=2, N=6, D=16, H=16), dict(B=1, N=9, D=32, H=32, nomask=1), dict(B=1, N=7, D=20, H=20)):
        inputs = SPEC.inputs(s, seed=7, dist=dist, dtype=dtype)
        got, want = tg.trimul_gpumode(*inputs, **FUSED), SPEC.reference(*inputs)
        assert rel_err(got, want) < SPEC.tol(dtype), (s, rel_err(got, want))
        assert outside(got, want, dtype).float().mean() <= SPEC.outliers.get(dtype, 0), \
            describe_mismatch(got, want, dtype)
        if dtype == "fp32":
            assert contest_failures(got, pytorch_impl.expression(*inputs)) == 0, s
    assert len(first) == len(last) == 3 and all(kw["GATE_FIRST"] for kw in last)
    assert tg.launches(FUSED) == 3


@cpu_only
def test_the_fused_road_is_refused_where_the_forms_part():
    # D != H: the out gate's H columns are not the AlphaFold form's C; its gate from z or its pipelined last kernel
    # are that form's only. Refused naming this operation, before any launch
    prepared = tg.prepare(*SPEC.inputs(dict(B=1, N=4, D=6, H=3), dtype="bf16"))
    why = str(assert_refuses(tg.trimul_gpumode_prepared, NAME, "config", *prepared, **FUSED))
    assert "D == H" in why
    square = tg.prepare(*SPEC.inputs(dict(B=1, N=4, D=8, H=8), dtype="bf16"))
    for bad in (dict(FIN_ZGATE=True), dict(FIN_PIPE=2)):
        assert "FIN_ZGATE" in str(assert_refuses(tg.trimul_gpumode_prepared, NAME, "config", *square,
                                                 **dict(FUSED, **bad)))
    assert _impl("bf16").variant(**FUSED).limits(dict(B=1, N=4, D=6, H=3))
    assert _impl("bf16").variant(**FUSED).limits(dict(B=1, N=4, D=8, H=8)) is None


@cpu_only
def test_out_is_written_and_both_entry_points_agree():
    inputs = SPEC.inputs(dict(B=2, N=6, D=8, H=4), seed=3)
    out = torch.full_like(inputs[0], math.nan)
    assert tg.trimul_gpumode(*inputs, out=out) is out
    prepared = _impl().fn(*_impl().prepare(*inputs))
    assert torch.equal(out, prepared)
    assert torch.equal(out, mage.run(NAME, "triton", *inputs))


# ---- bad input -----------------------------------------------------------------------------------------
def _bad(**change):
    x = dict(zip(ARGS, SPEC.inputs(dict(B=1, N=4, D=6, H=3))))
    x.update(change)
    return tuple(x[k] for k in ARGS)


BAD = [
    ("mask", dict(mask=torch.ones(1, 4, 5)), "mask of the wrong shape"),
    ("x", dict(x=torch.ones(4, 4, 6)), "x without a batch axis"),
    ("norm_w", dict(norm_w=torch.ones(5)), "norm_w for another D"),
    ("right_gate", dict(right_gate=torch.ones(3, 5)), "a projection with the wrong fan-in"),
    ("out_norm_b", dict(out_norm_b=torch.ones(4)), "out_norm_b for another H"),
    ("to_out", dict(to_out=torch.ones(3, 6)), "to_out transposed"),
    ("left_proj", dict(left_proj=torch.ones(3, 6, dtype=torch.float64)), "a float64 weight"),
    ("mask", dict(mask=torch.ones(1, 4, 4, dtype=torch.bfloat16)), "mixed precisions"),
]


@pytest.mark.parametrize("arg,change,why", BAD, ids=[b[2] for b in BAD])
def test_bad_inputs_are_refused_by_name(arg, change, why):
    inputs = _bad(**change)
    assert_refuses(tg.trimul_gpumode, NAME, arg, *inputs)
    assert_refuses(_impl().prepare, NAME, arg, *inputs)
    assert_refuses(lambda *a: mage.run(NAME, "triton", *a), NAME, arg, *inputs)


def test_the_prepared_call_refuses_unprepared_arguments_and_bad_configs(monkeypatch):
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # refused before any launch
    inputs = SPEC.inputs(dict(B=1, N=4, D=6, H=3))
    prepared = tg.prepare(*inputs)
    unstacked = prepared[:4] + (inputs[4],) + prepared[5:]  # one projection where the stack belongs
    assert_refuses(tg.trimul_gpumode_prepared, NAME, "w_in", *unstacked)
    assert "power of two" in str(assert_refuses(tg.trimul_gpumode_prepared, NAME, "config", *prepared, GATE_V=48))
    assert "STORE" in str(assert_refuses(tg.trimul_gpumode_prepared, NAME, "config", *prepared, STORE="scatter"))
    # the AlphaFold column's cuBLAS road is not one of this form's
    assert "GEMM" in str(assert_refuses(tg.trimul_gpumode_prepared, NAME, "config", *prepared, GEMM="cublas"))
    bad_tiles = dict(tg.TILES["fp32"]["gated_x3_tma_128x128x64_w8_s3"], GATED_TILES="m1_n1")
    assert "GATED_TILES" in str(assert_refuses(tg.trimul_gpumode_prepared, NAME, "config", *prepared, **bad_tiles))


# ---- launches --------------------------------------------------------------------------------------------
class _Recorder:
    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((self.name, grid, kwargs))


@pytest.mark.parametrize("store", ("permute", "direct"))
def test_launches_per_call(monkeypatch, store):
    from kernels.layernorm import triton_kernel as ln
    calls = []
    monkeypatch.setattr(tg.af3, "_gate_kernel", _Recorder(calls, "gates"))
    monkeypatch.setattr(tg.proj, "_out_gate_kernel", _Recorder(calls, "out gate"))
    monkeypatch.setattr(tg, "gemm_epilogue", lambda A, W, bias, out, **kw: calls.append(("GEMM", W.shape, kw)) or out)
    monkeypatch.setattr(tg.af3.road, "_batched_gemm_kernel", _Recorder(calls, "contraction"))
    monkeypatch.setattr(tg.af3.road, "_transpose_kernel", _Recorder(calls, "transpose"))
    monkeypatch.setattr(ln, "_layernorm_kernel", _Recorder(calls, "layernorm"))
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    B, N, D, H = 1, 40, 24, 8
    sizes = [(B, N, N, D), (B, N, N), (D,), (D,)] + [(H, D)] * 5 + [(H,), (H,), (D, H)]
    tg.trimul_gpumode(*(torch.empty(s, device="meta") for s in sizes), STORE=store)
    names = [c[0] for c in calls]
    assert names == ["layernorm", "GEMM", "gates", "contraction"] + (["transpose"] if store == "permute" else []) + \
        ["layernorm", "out gate", "GEMM"]
    assert len(calls) == tg.launches(dict(tg.TILES["fp32"].base_config(), STORE=store))
    assert calls[1][1] == (5 * H, D) and calls[-1][1] == (D, H)  # one GEMM for the five projections
    # the out gate reads p's last H columns (offset 4H) and gates LN(o) [B N^2, H] in place
    assert calls[-2][1] == (common.cdiv(B * N * N, 32), common.cdiv(H, 64))


# ---- on a GPU ----------------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_gpu_random_shapes(dtype):
    bad = _gpu_misses(_impl(dtype), SPEC.random_shapes(30) + SPEC.awkward + SPEC.shapes["field"])
    assert not bad, bad[:5]


def _gpu_misses(impl, shapes) -> list:
    """(shape, distribution, reason) wherever ``impl`` misses the float64 check on the GPU, each shape drawn both
    normal and heavy-tailed."""
    return [(s, d, r.reason) for s in shapes for d in ("normal", "heavy")
            for r in [check(impl, s, trials=1, dist=d, device="cuda")] if not r.passed]


@gpu
@pytest.mark.parametrize("dist", ("normal", "heavy"))
@pytest.mark.parametrize("config", (None, "gated_x3_tma_128x128x64_w8_s3"))
def test_gpu_contest_verdict_at_the_contest_shapes(dist, config):
    torch.backends.cuda.matmul.allow_tf32 = False  # the task's FP32 reference
    for s in CONTEST:
        inputs = SPEC.inputs(s, seed=0, device="cuda", dist=dist)
        got = tg.trimul_gpumode(*inputs, **(tg.TILES["fp32"][config] if config else {}))
        assert contest_failures(got, pytorch_impl.expression(*inputs)) == 0, s


@gpu
def test_gpu_the_fused_config_at_random_shapes():
    # where it holds (D == H), with the contest's D = 128 shapes among them
    impl = _impl("bf16").variant(**FUSED)
    shapes = [dict(s, D=s["H"]) for s in SPEC.random_shapes(20)] + [s for s in CONTEST if s["D"] == s["H"]]
    bad = _gpu_misses(impl, [s for s in shapes if not impl.limits(s)])
    assert not bad, bad[:5]


@gpu
def test_gpu_the_gated_config_at_random_shapes():
    impl = _impl().variant(**tg.TILES["fp32"]["gated_x3_tma_128x128x64_w8_s3"])
    bad = _gpu_misses(impl, SPEC.random_shapes(20) + SPEC.awkward + [dict(B=1, N=256, D=384, H=128, nomask=0)])
    assert not bad, bad[:5]
