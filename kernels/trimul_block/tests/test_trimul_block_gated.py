"""The steps road with the gates and the mask in the first projection's epilogue (GEMM road 'hopper_gated',
``kernels/trimul_block/_gated_in``): it agrees with float64 (normal and heavy-tailed, a batch, either layout of the
contraction's copies, allocations poisoned), runs one launch a complex where H allows and takes the gate kernel
where it does not, and its kernel compiles for sm_90a without spills."""
from __future__ import annotations

import pytest
import torch

from kernels._triton import sm90
from kernels.trimul_block import _gated_in
from kernels.trimul_block import triton_block as tb
from mage import ops, registry
from mage.check import describe_mismatch, outside
from tests.support.kernel_checks import Counted, Keywords, assert_refuses, cpu_only, gpu, gpu_failures, rel_err

from . import test_trimul_block as tbt  # (its launch recorder, over meta tensors)

NAME = "trimul_block"
SPEC = ops.OPS[NAME]
GATED = [(d, n) for d in ("fp32", "bf16") for n in tb.TILES[d].configs if tb.TILES[d][n]["GEMM"] == "hopper_gated"]


def _run(monkeypatch, dtype, name, shape, batch=0, dist="normal", seed=1, **over):
    calls = []
    monkeypatch.setattr(_gated_in, "_gated_in_kernel", Counted(_gated_in._gated_in_kernel, calls))
    reqs = [SPEC.inputs(shape, seed=seed + c, dist=dist, dtype=dtype) for c in range(max(batch, 1))]
    z = torch.stack([r[0] for r in reqs]) if batch else reqs[0][0]
    mask = torch.stack([r[1] for r in reqs]) if batch else reqs[0][1]
    out = tb.trimul_block(z, mask, *reqs[0][2:], **dict(tb.TILES[dtype][name], **over))
    for c in range(max(batch, 1)):
        got = out[c] if batch else out
        want = SPEC.reference(z[c] if batch else z, mask[c] if batch else mask, *reqs[0][2:])
        assert rel_err(got, want) <= SPEC.tol(dtype), (name, shape, c, rel_err(got, want))
        assert not outside(got, want, dtype).any(), describe_mismatch(got, want, dtype)
    return calls


def test_launches_per_call_on_the_gated_road(monkeypatch):
    calls = tbt._launches(monkeypatch, dict(N=40, C=8, H=8), **tb.TILES["fp32"]["hopper_gated_x3"])  # (C = 8: rows TMA reads in place)
    assert [c[0] for c in calls] == ["layernorm", "gated projection", "contraction", "transpose", "layernorm",
                                     "K-major copy", "Hopper GEMM"]  # (w_out's copy: once while it lives)
    assert len(calls) == tb.launches(tb.TILES["fp32"]["hopper_gated_x3"]) + 1


def test_the_tables_list_gated_configs_at_both_precisions():
    assert {d for d, _ in GATED} == {"fp32", "bf16"}


@cpu_only
@pytest.mark.parametrize("dtype,name", GATED)
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_the_gated_projection_agrees_with_float64(dtype, name, dist, poisoned, monkeypatch):
    # N = 13: the pairs' last row tile part-filled; H = 12 (4H = 48: tiles of 16 columns, 8 channels each); C = 20:
    # g's columns end inside a tile, and K = 20 rows of 80 bytes (TMA reads them in place)
    assert len(_run(monkeypatch, dtype, name, dict(N=13, C=20, H=12), dist=dist)) == 1


@cpu_only
@pytest.mark.parametrize("k_inner", (True, False))
def test_a_batch_of_complexes_in_either_layout(k_inner, poisoned, monkeypatch):
    calls = _run(monkeypatch, "fp32", GATED[0][1], dict(N=9, C=8, H=8), batch=3, dist="heavy", seed=7,
                 K_INNER=k_inner)
    assert len(calls) == 3  # one launch a complex


@cpu_only
def test_o_left_channel_major_for_the_layernorm_in_a_batch(poisoned, monkeypatch):
    # STORE 'layernorm': the contraction's output stays [B, H, N, N] and the second LayerNorm reads each complex in
    # place: no transposing copy
    moved = []
    monkeypatch.setattr(tb.road, "transpose", lambda *a, **k: moved.append(a))
    calls = _run(monkeypatch, "fp32", "hopper_gated_x3_tma_128x128x64_w8_s3_lncm", dict(N=11, C=8, H=16), batch=2,
                 dist="heavy", seed=5)
    assert len(calls) == 2 and moved == []


@cpu_only
@pytest.mark.parametrize("key", ("GATED_TILES", "OUT_TILES"))
def test_a_tile_name_not_in_the_hopper_table_is_refused(key):
    args = SPEC.inputs(dict(N=4, C=8, H=8), seed=1)
    e = assert_refuses(tb.trimul_block, NAME, "config", *args, **dict(tb.TILES["fp32"][GATED[0][1]],
                                                                      **{key: "m128_n128_k32_w8_s9"}))
    assert key in str(e)


@cpu_only
def test_the_named_tiles_reach_both_hopper_gemms(monkeypatch):
    from kernels.matmul import triton_hopper as hop
    name = next(n for d, n in GATED if d == "fp32" and tb.TILES[d][n]["OUT_TILES"] and tb.TILES[d][n]["GATED_TILES"])
    gated_seen, out_seen, gemm = [], [], hop.gemm
    monkeypatch.setattr(_gated_in, "_gated_in_kernel", Keywords(_gated_in._gated_in_kernel, gated_seen))
    monkeypatch.setattr(hop, "gemm", lambda *a, **k: out_seen.append(k) or gemm(*a, **k))
    calls = _run(monkeypatch, "fp32", name, dict(N=9, C=8, H=8))
    out = hop.TILES["fp32x3"][tb.TILES["fp32"][name]["OUT_TILES"]]
    assert len(calls) == 1 and len(out_seen) == 1 and all(out_seen[0][k] == v for k, v in out.items())
    gated = hop.TILES["fp32x3"][tb.TILES["fp32"][name]["GATED_TILES"]]
    launched = gated_seen[0]
    assert (launched["BLOCK_K"], launched["FLATTEN"], launched["num_warps"], launched["num_stages"]) == \
        (gated["BLOCK_K"], bool(gated["FLATTEN"]), gated["num_warps"], gated["num_stages"])


@cpu_only
def test_the_layernorm_epilogue_is_refused_on_the_fused_road():
    args = SPEC.inputs(dict(N=4, C=8, H=8), seed=1)
    e = assert_refuses(tb.trimul_block, NAME, "config", *args,
                       **dict(tb.TILES["bf16"]["fused_r64_h32_cublas"], STORE="layernorm"))
    assert "STORE" in str(e)


@cpu_only
def test_h_too_small_for_a_gated_tile_takes_the_gate_kernel(poisoned, monkeypatch):
    assert _gated_in.block_n(3, 128) == 0 and _gated_in.block_n(12, 128) == 16 and _gated_in.block_n(128, 128) == 128
    assert _run(monkeypatch, "fp32", GATED[0][1], dict(N=6, C=8, H=3)) == []


@pytest.mark.slow
@pytest.mark.skipif(not sm90.available(), reason="Triton's wheel has no cuobjdump")
@pytest.mark.parametrize("dtype,tiles", sorted({(d, tb.TILES[d][n]["GATED_TILES"]) for d, n in GATED}))
def test_the_gated_kernel_compiles_for_sm90_without_spills(dtype, tiles):
    # the Hopper road's own tiles at the block's sizes ('') and those each gated config names (a flattened loop)
    from kernels.matmul import triton_hopper as hop
    precision = "fp32x3" if dtype == "fp32" else "bf16"
    t = hop.TILES[precision].choose(dict(M=1 << 20, K=128, N=640), dict(hop.TILES[precision][tiles]) if tiles else {})
    bm, bk, ty = t["BLOCK_M"], t["BLOCK_K"], dtype
    sig = dict(a_desc=f"tensordesc<{ty}[{bm}, {bk}]>", w_desc=f"tensordesc<{ty}[128, {bk}]>", Bias=f"*{ty}",
               AB=f"*{ty}", G=f"*{ty}", Mask=f"*{ty}", R="i32", N="i32", H="i32", C_out="i32", K="i32",
               stride_g="i32")
    consts = dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=bk, GROUP_M=t["GROUP_M"], NUM_SMS=132,
                  PRECISION=hop.PRECISION[precision], K_INNER=True, OFFS_64=False, FLATTEN=bool(t["FLATTEN"]))
    sig.update({k: "constexpr" for k in consts})
    u = sm90.resources("kernels.trimul_block._gated_in:_gated_in_kernel", sig, consts, t["num_warps"],
                       t["num_stages"], aligned=("Bias", "AB", "G", "Mask", "R", "N", "C_out", "K", "stride_g"))
    assert u["stack"] == 0 and u["shared"] <= sm90.SHARED_LIMIT, (dtype, u)


@pytest.mark.slow
@pytest.mark.skipif(not sm90.available(), reason="Triton's wheel has no cuobjdump")
@pytest.mark.parametrize("name", sorted({tb.TILES["fp32"][n]["OUT_TILES"] for n in tb.TILES["fp32"].configs} - {""}))
def test_the_output_gemms_named_tiles_compile_with_the_gate_without_spills(name):
    from kernels.matmul import triton_hopper as hop
    from kernels.matmul.tests.test_matmul_hopper_sm90 import _usage
    u = _usage(hop.TILES["fp32x3"][name], "fp32x3", epilogue=2)  # the bias and the gate, as project_out calls it
    assert u["stack"] == 0 and u["shared"] <= sm90.SHARED_LIMIT, (name, u)


@gpu
@pytest.mark.parametrize("dtype,name", GATED)
def test_gpu_gated_configs_at_random_shapes(dtype, name):
    impl = registry.get(NAME, "triton", dtype).variant(**tb.TILES[dtype][name])
    shapes = SPEC.random_shapes(20) + SPEC.awkward + SPEC.shapes["field"] + [dict(N=256, C=128, H=128)]
    assert not gpu_failures(impl, shapes)


@gpu
def test_gpu_the_gated_kernel_is_the_one_that_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(_gated_in, "_gated_in_kernel", Counted(_gated_in._gated_in_kernel, calls))
    args = SPEC.inputs(dict(N=64, C=128, H=128), seed=2, device="cuda")
    out = tb.trimul_block(*args, **tb.TILES["fp32"][GATED[0][1]])
    assert len(calls) == 1 and torch.cuda.get_device_capability() == (9, 0)
    assert rel_err(out.cpu(), SPEC.reference(*(a.cpu() for a in args))) <= SPEC.tol("fp32")


@cpu_only
def test_without_hopper_the_rule_takes_the_fused_road_and_the_gate_kernel(poisoned, monkeypatch):
    # the FP32 rule names 'hopper_gated' from N = 256; on a card without TMA and warpgroup MMA it must run (as the
    # x3 config it replaced), not be refused as the plain 'hopper' road is
    from kernels.matmul import triton_hopper as hop
    rule = tb.TILES["fp32"].choose(dict(N=256, C=128, H=128), {})
    assert rule["GEMM"] == "hopper_gated"
    monkeypatch.setattr(hop, "available", lambda device=None: False)
    gates = []
    monkeypatch.setattr(tb, "_gate_kernel", Counted(tb._gate_kernel, gates))
    assert _run(monkeypatch, "fp32", "hopper_gated_x3", dict(N=10, C=12, H=8)) == [] and len(gates) == 1
    name = next(n for n in tb.TILES["fp32"].configs if tb.TILES["fp32"][n] == rule)
    assert _run(monkeypatch, "fp32", name, dict(N=10, C=12, H=8)) == [] and len(gates) == 2  # the rule itself
    old = tb.TILES["fp32"]["fused_m64_n128_k32_w4_s4_x3"]
    # the x3 config's launches, less the transposing copy where o stays channel-major for the LayerNorm
    assert tb.launches(rule) == tb.launches(old) - (rule["STORE"] == "layernorm")
    assert {k: rule[k] for k in old if k.startswith("GEMM_")} == {k: old[k] for k in old if k.startswith("GEMM_")}
