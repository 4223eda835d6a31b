"""The FP32 block's contraction by TMA (config key ``CONTRACT_TMA``, ``kernels/triangle/_hopper``): it runs where N
allows and agrees with float64 (normal and heavy-tailed, a batch, allocations poisoned), N that TMA cannot read takes
the pointer kernel, bad values are refused, and each listed config compiles for sm_90a without spills."""
from __future__ import annotations

import pytest
import torch

from kernels._triton import sm90
from kernels.triangle import _hopper
from kernels.trimul_block import triton_block as tb
from mage import ops
from mage.check import describe_mismatch, outside
from mage import registry
from tests.support.kernel_checks import Counted, assert_refuses, cpu_only, gpu, gpu_failures, rel_err

NAME = "trimul_block"
SPEC = ops.OPS[NAME]
TMA = [n for n in tb.TILES["fp32"].configs if tb.TILES["fp32"][n]["CONTRACT_TMA"]]


def _run(monkeypatch, name, shape, batch=0, dist="normal", seed=1):
    calls = []
    monkeypatch.setattr(_hopper, "_batched_tma_kernel", Counted(_hopper._batched_tma_kernel, calls))
    reqs = [SPEC.inputs(shape, seed=seed + c, dist=dist) for c in range(max(batch, 1))]
    z = torch.stack([r[0] for r in reqs]) if batch else reqs[0][0]
    mask = torch.stack([r[1] for r in reqs]) if batch else reqs[0][1]
    out = tb.trimul_block(z, mask, *reqs[0][2:], **tb.TILES["fp32"][name])
    for c in range(max(batch, 1)):
        got = out[c] if batch else out
        want = SPEC.reference(z[c] if batch else z, mask[c] if batch else mask, *reqs[0][2:])
        assert rel_err(got, want) <= SPEC.tol("fp32"), (name, shape, c, rel_err(got, want))
        assert not outside(got, want, "fp32").any(), describe_mismatch(got, want, "fp32")
    return calls


def test_the_table_lists_tma_configs_on_both_roads():
    assert {tb.TILES["fp32"][n]["ROAD"] for n in TMA} == {"steps", "fused"}


@cpu_only
@pytest.mark.parametrize("name", TMA)
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_the_contraction_by_tma_agrees_with_float64(name, dist, poisoned, monkeypatch):
    # N = 20: one tile of rows and columns past N (read from the next channel's rows, never stored); H = 9 channels
    calls = _run(monkeypatch, name, dict(N=20, C=12, H=9), dist=dist)
    assert len(calls) == 1


@cpu_only
def test_a_batch_of_complexes_each_by_tma(poisoned, monkeypatch):
    calls = _run(monkeypatch, TMA[0], dict(N=12, C=8, H=5), batch=3, dist="heavy", seed=11)
    assert len(calls) == 3  # one launch a complex, as the pointer kernel


@cpu_only
def test_n_that_tma_cannot_read_takes_the_pointer_kernel(poisoned, monkeypatch):
    assert _run(monkeypatch, TMA[0], dict(N=7, C=8, H=5)) == []  # 28-byte rows


@cpu_only
def test_the_pointer_fallback_takes_tiles_that_fit_cards_without_tma(poisoned, monkeypatch):
    # a TMA config's own tiles (128x128x64, three stages: 192 KB) would not fit there; the fallback takes the
    # triangle's fp32x3 base, as the FP32 rule did before the TMA kernel
    seen, kernel = [], tb.road._batched_gemm_kernel

    class _Kwargs:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append(kw) or kernel[grid](*a, **kw)

    monkeypatch.setattr(tb.road, "_batched_gemm_kernel", _Kwargs())
    assert _run(monkeypatch, "fused_m64_n128_k32_w4_s4_x3_tma_128x128x64_w8_s3", dict(N=7, C=8, H=5)) == []
    assert [(k["BLOCK_I"], k["BLOCK_J"], k["BLOCK_K"], k["num_warps"], k["num_stages"]) for k in seen] == \
        [(128, 64, 32, 4, 4)]


@cpu_only
def test_bad_values_are_refused():
    args = SPEC.inputs(dict(N=4, C=8, H=8), seed=1)
    e = assert_refuses(tb.trimul_block, NAME, "config", *args, **dict(tb.TILES["fp32"][TMA[0]], CONTRACT_TMA=2))
    assert "CONTRACT_TMA" in str(e)
    fused = tb.TILES["fp32"]["fused_r64_h32_w8_x3"]
    e = assert_refuses(tb.trimul_block, NAME, "config", *args, **dict(fused, CONTRACT_TMA=1, BMM="cublas"))
    assert "CONTRACT_TMA" in str(e) and "BMM='triton'" in str(e)


@pytest.mark.slow
@pytest.mark.skipif(not sm90.available(), reason="Triton's wheel has no cuobjdump")
@pytest.mark.parametrize("name", TMA)
def test_the_tma_contraction_compiles_for_sm90_without_spills(name):
    c = tb.TILES["fp32"][name]
    bi, bj, bk = c["BLOCK_I"], c["BLOCK_J"], c["BLOCK_K"]
    sig = dict(a_desc=f"tensordesc<fp32[{bi}, {bk}]>", b_desc=f"tensordesc<fp32[{bj}, {bk}]>", O="*fp32", N="i32",
               C="i32", so_i="i32", so_j="i32", so_c="i32")
    consts = dict(BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk, GROUP_I=c["GROUP_I"], NUM_PROGRAMS=132, PRECISION="tf32x3",
                  OFFS_64=False)
    sig.update({k: "constexpr" for k in consts})
    u = sm90.resources("kernels.triangle._hopper:_batched_tma_kernel", sig, consts, c["num_warps"], c["num_stages"],
                       aligned=("O", "N", "so_i", "so_c"))
    assert u["stack"] == 0 and u["shared"] <= sm90.SHARED_LIMIT, (name, u)


@gpu
@pytest.mark.parametrize("name", TMA)
def test_gpu_tma_configs_at_random_shapes(name):
    # random shapes (N a multiple of 4 or not: TMA or the pointer kernel), the awkward ones, the field shape and one
    # AF3-class shape
    impl = registry.get(NAME, "triton", "fp32").variant(**tb.TILES["fp32"][name])
    shapes = SPEC.random_shapes(20) + SPEC.awkward + SPEC.shapes["field"] + [dict(N=256, C=128, H=128)]
    assert not gpu_failures(impl, shapes)


@gpu
def test_gpu_the_tma_kernel_is_the_one_that_runs(monkeypatch):
    # on a Hopper card; elsewhere the pointer kernel would run under the same config (``_hopper.available``)
    calls = []
    monkeypatch.setattr(_hopper, "_batched_tma_kernel", Counted(_hopper._batched_tma_kernel, calls))
    args = SPEC.inputs(dict(N=64, C=128, H=128), seed=2, device="cuda")
    out = tb.trimul_block(*args, **tb.TILES["fp32"][TMA[0]])
    assert len(calls) == 1 and torch.cuda.get_device_capability() == (9, 0)
    assert rel_err(out.cpu(), SPEC.reference(*(a.cpu() for a in args))) <= SPEC.tol("fp32")
