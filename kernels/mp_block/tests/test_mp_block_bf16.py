"""The message-passing layer's Triton column at bf16 (bf16 features and weights, FP32 sums in every
kernel, FP32 edge weights), and the aggregation kernel's bf16 path it is built on: under the
interpreter at tiny shapes; on a GPU at 30+ random shapes against the float64 reference of the bf16
inputs, and its launches per call."""
from __future__ import annotations

import pytest
import torch

from tests.support.kernel_checks import assert_refuses, check_shapes, cpu_only, gpu, gpu_failures, rel_err
from mage import ops, registry

OP = "mp_block"
SPEC = ops.OPS[OP]
TOL = SPEC.tol("bf16")


def _impl():
    return registry.get(OP, "triton", "bf16")


@cpu_only
@pytest.mark.parametrize("split", [0, 4])  # 4: every row past 4 edges is a hub, summed in chunks
def test_aggregation_kernel_takes_bf16_features(split):
    from kernels.neighbor_agg.triton_kernel import neighbor_agg
    agg = ops.OPS["neighbor_agg"]
    graph, x = agg.inputs(dict(n=60, F=9, deg=7, dist="skewed"), seed=1)
    x = x.bfloat16()
    out = torch.full((60, 9), float("nan"), dtype=torch.bfloat16)
    cfg = dict(BLOCK_R=4, BLOCK_D=4, BLOCK_E=4, SPLIT=split, MAX_BLOCK_F=8, num_warps=4)
    assert neighbor_agg(graph, x, out=out, **cfg) is out
    assert rel_err(out, agg.reference(graph, x)) < 8e-3  # FP32 sums, one bf16 rounding (about 2^-9)
    assert_refuses(neighbor_agg, "neighbor_agg", "x", graph, x[:-1])
    assert_refuses(neighbor_agg, "neighbor_agg", "out", graph, x, out=torch.empty(60, 9))


@cpu_only
@pytest.mark.parametrize("road", ["cublas", "fused"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_block_at_awkward_shapes(dist, road):
    check_shapes(_impl().variant(GEMM=road), SPEC.awkward, dist, trials=1)


@cpu_only
def test_bf16_output_is_bf16_and_the_operator_takes_bf16():
    from kernels.mp_block.triton_block import mp_block
    inputs = SPEC.inputs(dict(n=37, F=33, H=17, deg=24), seed=2, dtype="bf16")
    ref = SPEC.reference(*inputs)
    out = torch.full((37, 33), float("nan"), dtype=torch.bfloat16)
    assert mp_block(*inputs, out=out) is out and rel_err(out, ref) < TOL / 2
    g = inputs[0]
    y = torch.ops.mage.triton_mp_block(g.rowptr, g.col, g.w, *inputs[1:])
    assert y.dtype == torch.bfloat16 and rel_err(y, ref) < TOL / 2


def test_bf16_block_refuses_a_stray_fp32_weight():
    from kernels.mp_block.triton_block import mp_block
    graph, h, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(n=5, F=4, H=3, deg=2), dtype="bf16")
    assert_refuses(mp_block, OP, "b1", graph, h, gamma, beta, W1, b1.float(), W2, b2)


# ---- on a GPU ---------------------------------------------------------------------------------------
@gpu
def test_gpu_bf16_block_at_random_shapes():
    failures = gpu_failures(_impl(), SPEC.random_shapes(30, seed=31) + SPEC.awkward + SPEC.shapes["field"])
    assert not failures, failures[:5]


@gpu
def test_gpu_bf16_every_sweep_config_at_random_shapes():
    for cfg in _impl().sweep[1:]:
        failures = gpu_failures(_impl().variant(**cfg), SPEC.random_shapes(10, seed=32) + SPEC.shapes["field"])
        assert not failures, (cfg, failures[:3])


@gpu
@pytest.mark.parametrize("road", ["cublas", "fused"])
def test_gpu_bf16_launches_per_call(road):
    from kernels.mp_block.triton_block import launches
    from mage.profile import profile
    impl = _impl().variant(GEMM=road)
    args = impl.prepare(*SPEC.inputs(SPEC.shapes["field"][0], seed=0, device="cuda", dtype="bf16"))
    counts = []
    for _ in range(2):
        p = profile(lambda: impl.fn(*args), iters=20)
        assert "launches_unstable" not in p.flags, (p.flags, p.per_iter_launches)
        counts.append(p.launches)
    print(f"\n{OP}/triton {road}/bf16: {counts[0]:g} launches per call: {p.kernel_names}")
    assert counts[0] == counts[1] == launches(impl.config), (counts, p.kernel_names)
