"""The triangle update's Triton column at bf16 (bf16 storage between the kernels, FP32 math in each, the
contraction as a bf16 tensor-core GEMM with an FP32 accumulator): under the interpreter at tiny shapes;
on a GPU at 30+ random shapes against the float64 reference of the bf16 inputs, every bf16 sweep
config, and its launches per call."""
from __future__ import annotations

import math

import pytest
import torch

import kernels.trimul_block.triton_block as tb
from tests.support.kernel_checks import assert_refuses, check_shapes, cpu_only, gpu, gpu_failures, rel_err
from mage import ops, registry
from mage.check import check

NAME = "trimul_block"
SPEC = ops.OPS[NAME]
TOL = SPEC.tol("bf16")


def _impl():
    return registry.get(NAME, "triton", "bf16")


def test_bf16_is_registered_with_tensor_core_tiles():
    impl = _impl()
    assert impl.dtype == "bf16" and impl.sweep[0] == tb.FIRST_BF16
    assert all(c["K_INNER"] and c["BLOCK_K"] == 64 for c in impl.sweep)  # both operands K-major
    assert impl.config_at(SPEC.shapes["field"][0]) == tb.FIRST_BF16
    assert impl.config_at(SPEC.shapes["large"][0]) == tb.TILES["bf16"]["fused_r64_h32_tma2_r64_fsig_ab_g64_cublas"]  # N >= 256


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_block_at_awkward_shapes(dist):
    check_shapes(_impl(), SPEC.awkward, dist, trials=1)


@cpu_only
def test_every_bf16_sweep_config():
    for cfg in _impl().sweep:  # 'permute' and 'direct' stores, 1 to 16 channels a program
        r = check(_impl().variant(**cfg), dict(N=5, C=7, H=17), trials=1, device="cpu")
        assert r.passed, (cfg, r.reason)


@cpu_only
def test_bf16_output_is_bf16_written_into_out_and_views_are_taken():
    inputs = SPEC.inputs(dict(N=6, C=8, H=4), seed=3, dtype="bf16")
    z, mask, *w = inputs
    ref = SPEC.reference(*inputs)
    out = torch.full_like(z, math.nan)
    assert tb.trimul_block(*inputs, out=out) is out and out.dtype == torch.bfloat16
    assert rel_err(out, ref) < TOL
    mask_t = mask.t().contiguous().t()  # a transposed view of the mask: its strides reach the gate kernel
    assert rel_err(tb.trimul_block(z, mask_t, *w), ref) < TOL
    assert rel_err(torch.ops.mage.triton_trimul_block(*inputs), ref) < TOL


@cpu_only
def test_bf16_values_are_rounded_to_nearest_not_toward_zero():
    # Triton's interpreter converts FP32 to bf16 by truncation; the GPU rounds to nearest even. A block
    # whose kernels stored bf16 under the interpreter put about three quarters of its outputs below the
    # float64 reference in magnitude (all five Triton stores biased toward zero); rounded to nearest,
    # about half are below and half above.
    below = []
    for seed in range(3):
        inputs = SPEC.inputs(dict(N=4, C=16, H=8), seed=seed, dtype="bf16")
        out, ref = tb.trimul_block(*inputs).double(), SPEC.reference(*inputs)
        below.append((out.abs() < ref.abs())[ref != 0].double())
    frac = float(torch.cat(below).mean())
    assert 0.35 < frac < 0.65, f"{frac:.2f} of the outputs lie below the reference in magnitude"


@cpu_only
def test_bf16_fuzz_case_within_tolerance():
    # the CPU fuzz's case (seed 0): 2.24e-2 with truncating stores, 1.14e-2 rounded to nearest
    inputs = SPEC.inputs(dict(N=2, C=3, H=5), seed=408092400, dtype="bf16")
    assert rel_err(tb.trimul_block(*inputs), SPEC.reference(*inputs)) < TOL


@cpu_only
def test_bf16_expanded_weight_reads_as_its_contiguous_copy():
    # a stride-0 (expanded) w_in is read through its strides, never as if contiguous: the answer is the
    # contiguous copy's, bit for bit
    z, mask, gi, bi, w_in, *rest = SPEC.inputs(dict(N=5, C=7, H=3), seed=1, dtype="bf16")
    w_exp = w_in[:, :1].expand(w_in.shape)
    got = tb.trimul_block(z, mask, gi, bi, w_exp, *rest)
    assert torch.equal(got, tb.trimul_block(z, mask, gi, bi, w_exp.contiguous(), *rest))


def test_bf16_block_refuses_mixed_precisions():
    z, mask, *w = SPEC.inputs(dict(N=3, C=2, H=2), dtype="bf16")
    assert_refuses(tb.trimul_block, NAME, "mask", z, mask.float(), *w)
    assert_refuses(tb.trimul_block, NAME, "out", z, mask, *w, out=torch.empty(3, 3, 2))


# ---- on a GPU ---------------------------------------------------------------------------------------
def _random_check(impl, seed):
    shapes = SPEC.random_shapes(30, seed=seed) + SPEC.awkward + SPEC.shapes["field"] + SPEC.shapes["large"]
    bad = gpu_failures(impl, shapes)
    return bad


@gpu
def test_gpu_bf16_block_at_random_shapes():
    assert not (bad := _random_check(_impl(), seed=21)), bad[:5]


@gpu
def test_gpu_bf16_every_sweep_config_at_random_shapes():
    for cfg in _impl().sweep[1:]:
        assert not (bad := _random_check(_impl().variant(**cfg), seed=22)), (cfg, bad[:5])


@gpu
@pytest.mark.parametrize("k", range(len(tb.TILES["bf16"].sweep)))
def test_gpu_bf16_launches_per_call(k):
    from mage.profile import profile
    impl = _impl().variant(**tb.TILES["bf16"].sweep_configs()[k])
    args = SPEC.inputs(SPEC.shapes["field"][0], device="cuda", dtype="bf16")
    counts = [profile(lambda: impl.fn(*args), iters=5, warmup=2).launches for _ in range(2)]
    print(f"\n{NAME}/triton/bf16 {impl.config['STORE']}: {counts[0]} launches a call")
    assert counts[0] == counts[1] == tb.launches(impl.config), counts
