"""The MLP block's Triton column at bf16 (bf16 storage, FP32 math in every kernel), and the bf16 paths
of the two operation kernels it is built from (LayerNorm, bias + GELU): on the CPU under the
interpreter at tiny shapes; on a GPU at 30+ random shapes against the float64 reference of the bf16
inputs, every sweep config, and its launches per call."""
from __future__ import annotations

import pytest
import torch

from tests.support.kernel_checks import assert_refuses, check_shapes, cpu_only, gpu, gpu_failures, rel_err
from mage import ops, registry
from mage.check import check

OP = "mlp_block"
SPEC = ops.OPS[OP]
TOL = SPEC.tol("bf16")
TINY_FUSED = dict(GEMM="fused", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=1)


def _impl():
    return registry.get(OP, "triton", "bf16")


# ---- the operation kernels' bf16 paths (no operation-level bf16 column: the specs stay fp32) ---------
@cpu_only
@pytest.mark.parametrize("R,C", [(1, 1), (3, 37), (4, 1500)])  # 1500: LayerNorm's chunked road too
def test_layernorm_and_bias_gelu_kernels_take_bf16(R, C):
    from kernels.bias_gelu.triton_kernel import bias_gelu
    from kernels.layernorm.triton_kernel import layernorm
    gen = torch.Generator().manual_seed(R * C)
    x = (3.0 + torch.randn(R, C, generator=gen)).bfloat16()  # an offset: the mean must be removed in FP32
    g, b = torch.randn(C, generator=gen).bfloat16(), torch.randn(C, generator=gen).bfloat16()
    O = ops.OPS
    for cfg in ({}, dict(BLOCK_R=1, MAX_BLOCK_C=1024, num_warps=4, EVICT=0)):
        y = layernorm(x, g, b, **cfg)
        assert y.dtype == torch.bfloat16 and rel_err(y, O["layernorm"].reference(x, g, b)) < 8e-3
    out = torch.full((R, C), float("nan"), dtype=torch.bfloat16)
    assert bias_gelu(x, b, out=out) is out
    assert rel_err(out, O["bias_gelu"].reference(x, b)) < 8e-3  # one bf16 rounding: about 2^-9


@cpu_only
def test_kernels_refuse_mixed_precisions_naming_the_argument():
    from kernels.bias_gelu.triton_kernel import bias_gelu
    from kernels.layernorm.triton_kernel import layernorm
    x = torch.randn(3, 8).bfloat16()
    assert_refuses(bias_gelu, "bias_gelu", "b", x, torch.ones(8))
    assert_refuses(bias_gelu, "bias_gelu", "b", x, torch.ones(7, dtype=torch.bfloat16))
    assert_refuses(layernorm, "layernorm", "beta", x, torch.ones(8, dtype=torch.bfloat16), torch.ones(8))
    assert_refuses(layernorm, "layernorm", "x", x[0], torch.ones(8, dtype=torch.bfloat16),
                   torch.ones(8, dtype=torch.bfloat16))
    assert_refuses(layernorm, "layernorm", "out", x, *[torch.ones(8, dtype=torch.bfloat16)] * 2,
                   out=torch.empty(3, 8))


# ---- the block under the interpreter ----------------------------------------------------------------
def test_bf16_is_registered_with_every_road():
    impl = _impl()
    assert impl.dtype == "bf16" and impl.config_at(SPEC.shapes["field"][0]) == {"GEMM": "cublas"}
    assert {c["GEMM"] for c in impl.sweep} == {"cublas", "fused", "hopper"}  # hopper: the fused road on TMA + wgmma
    assert all(c.get("BLOCK_K", 64) == 64 for c in impl.sweep)  # bf16's own tiles, not tf32x3's


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_block_at_awkward_shapes(dist):
    check_shapes(_impl(), SPEC.awkward, dist, trials=1)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_fused_road_at_awkward_shapes(dist):
    shapes = SPEC.awkward[:-1] + [dict(T=20, d=45, hidden=70), dict(T=5, d=40, hidden=0)]
    check_shapes(_impl().variant(**TINY_FUSED), shapes, dist, trials=1)


@cpu_only
def test_bf16_output_is_bf16_written_into_out_and_rounded_like_storage():
    from kernels.mlp_block.triton_block import mlp_block
    inputs = SPEC.inputs(dict(T=9, d=40, hidden=72), seed=4, dtype="bf16")
    ref = SPEC.reference(*inputs)
    for cfg in ({}, TINY_FUSED):
        out = torch.full(inputs[0].shape, float("nan"), dtype=torch.bfloat16)
        assert mlp_block(*inputs, out=out, **cfg) is out
        err = rel_err(out, ref)
        # bf16 storage of the result alone costs about 2^-9 relative; FP32 math keeps it near that
        assert 1e-4 < err < TOL / 2, (cfg, err)
    y = torch.ops.mage.triton_mlp_block(*inputs)
    assert y.dtype == torch.bfloat16 and rel_err(y, ref) < TOL / 2


@cpu_only
def test_every_bf16_sweep_config():
    for cfg in _impl().sweep:
        r = check(_impl().variant(**cfg), dict(T=5, d=37, hidden=19), trials=1, device="cpu")
        assert r.passed, (cfg, r.reason)


def test_bf16_block_refuses_a_stray_fp32_weight():
    from kernels.mlp_block.triton_block import mlp_block
    x, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(T=3, d=8, hidden=4), dtype="bf16")
    assert_refuses(mlp_block, OP, "W2", x, gamma, beta, W1, b1, W2.float(), b2)
    assert_refuses(mlp_block, OP, "out", x, gamma, beta, W1, b1, W2, b2, out=torch.empty(3, 8))


# ---- on a GPU ---------------------------------------------------------------------------------------
def _random_check(impl, seed):
    failures = gpu_failures(impl, SPEC.random_shapes(30, seed=seed) + SPEC.awkward + SPEC.shapes["field"])
    return failures


@gpu
def test_gpu_bf16_block_at_random_shapes():
    assert not (f := _random_check(_impl(), seed=11)), f[:5]


@gpu
def test_gpu_bf16_every_sweep_config_at_random_shapes():
    for cfg in _impl().sweep[1:]:
        assert not (f := _random_check(_impl().variant(**cfg), seed=12)), (cfg, f[:5])


@gpu
@pytest.mark.parametrize("road", ["cublas", "fused"])
def test_gpu_bf16_launches_per_call(road):
    from kernels.mlp_block.triton_block import launches
    from mage.profile import profile
    impl = _impl().variant(GEMM=road)
    args = SPEC.inputs(SPEC.shapes["field"][0], seed=0, device="cuda", dtype="bf16")
    counts = []
    for _ in range(2):
        p = profile(lambda: impl.fn(*args), iters=20)
        assert "launches_unstable" not in p.flags, (p.flags, p.per_iter_launches)
        counts.append(p.launches)
    print(f"\n{OP}/triton {road}/bf16: {counts[0]:g} launches per call: {p.kernel_names}")
    assert counts[0] == counts[1] == launches(impl.config), (counts, p.kernel_names)
