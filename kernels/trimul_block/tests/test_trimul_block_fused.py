"""The triangle update's fused road (three launches: _fused): every fused config of both precisions under
the interpreter at awkward shapes, normal and heavy-tailed; the model's 128 channels whole in a program;
a batch of complexes; strided inputs; its refusals; on a GPU, every fused config at random shapes."""
from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl

from kernels.trimul_block import _fused, _fused_weights
from kernels.trimul_block import triton_block as tb
from mage import ops, registry
from mage.check import check, describe_mismatch, outside
from tests.support.kernel_checks import assert_refuses, check_shapes, cpu_only, gpu, gpu_failures, rel_err

NAME = "trimul_block"
SPEC = ops.OPS[NAME]
FUSED = [(dt, n) for dt in ("fp32", "bf16") for n in tb.TILES[dt].configs if tb.TILES[dt][n]["ROAD"] == "fused"]
# awkward and tiny: one token, channels below one dot tile, hidden channels past one chunk (H = 70 > 64)
SHAPES = [dict(N=1, C=1, H=1), dict(N=5, C=7, H=17), dict(N=4, C=20, H=70), dict(N=2, C=160, H=33),
          dict(N=0, C=4, H=4)]


def _held(dtype: str, name: str, shapes: list) -> list:
    """The shapes a config holds (its variant's stated limits): a resident config keeps w_in whole in shared
    memory, and shapes past its budget are refused (tested below), not computed."""
    return [s for s in shapes if not _variant(dtype, name).outside_limits(s)]


def _variant(dtype, name, **over):
    return registry.get(NAME, "triton", dtype).variant(**dict(tb.TILES[dtype][name], **over))


def test_every_fused_config_is_in_the_sweep_and_makes_three_launches():
    assert {n for _, n in FUSED} >= {"fused_r64_h32_join_cublas", "fused_r64_h32_w8_x3"}
    for dt, n in FUSED:
        assert tb.TILES[dt][n] in tb.TILES[dt].sweep_configs()
        assert tb.launches(tb.TILES[dt][n]) == 3


@cpu_only
@pytest.mark.parametrize("dist", ("normal", "heavy"))
@pytest.mark.parametrize("dtype,name", FUSED, ids=[f"{d}-{n}" for d, n in FUSED])
def test_fused_configs_at_awkward_shapes(dtype, name, dist):
    check_shapes(_variant(dtype, name), _held(dtype, name, SHAPES), dist)


@cpu_only
@pytest.mark.parametrize("dist", ("normal", "heavy"))
@pytest.mark.parametrize("dtype,name,over", [("fp32", "fused_r64_h32_w8_x3", {}), ("bf16", "fused_r64_h32_join_cublas", {}),
                                             ("bf16", "fused_r64_h32_tma2_r64_fsig_zg_cublas", dict(FIN_TMA=False)),
                                             ("bf16", "fused_r64_h32_tma2_r64_fsig_zg_cublas", dict(IN_TMA=False))])
def test_the_gate_from_z_in_the_last_kernel_by_every_weight_road(dtype, name, over, dist):
    # FIN_ZGATE's gate weights by pointer (without IN_TMA's padded copy or FIN_TMA) and through a descriptor
    # (the zg configs themselves, in the test above), at FP32 and bf16; batched in the test below
    check_shapes(_variant(dtype, name, FIN_ZGATE=True, FIN_GTMA=False, **over), SHAPES, dist)


@cpu_only
def test_the_resident_first_kernel_walks_tiles_across_complexes(poisoned):
    """Persistent: a few programs under the interpreter, each walking tiles that cross from one complex to
    the next (16 pairs a tile, 81 pairs a complex, three complexes: 18 tiles), each complex against its own
    float64 reference; and its refusals: FP32's w_in past the shared memory, a width past the budget."""
    name = next(n for d, n in FUSED if d == "bf16" and tb.TILES[d][n]["IN_RESIDENT"])
    v = _variant("bf16", name, IN_R=16)
    reqs = [SPEC.inputs(dict(N=9, C=12, H=20), seed=60 + c, dtype="bf16", dist="heavy" if c == 2 else "normal")
            for c in range(3)]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    out = torch.full_like(z, math.nan)
    v.fn(z, mask, *reqs[0][2:], out=out)
    for c, (zc, mc, *_) in enumerate(reqs):
        want = SPEC.reference(zc, mc, *reqs[0][2:])
        assert rel_err(out[c], want) <= SPEC.tol("bf16"), (c, rel_err(out[c], want))
    fp32 = SPEC.inputs(dict(N=3, C=128, H=128), seed=1)
    e = assert_refuses(lambda: tb.trimul_block(*fp32, **tb.TILES["bf16"][name]), "trimul_block", "config")
    assert "IN_RESIDENT" in str(e) and "4-byte" in str(e)
    wide = SPEC.inputs(dict(N=2, C=160, H=33), seed=1, dtype="bf16")
    e = assert_refuses(lambda: tb.trimul_block(*wide, **tb.TILES["bf16"][name]), "trimul_block", "config")
    assert "shared memory" in str(e) and v.outside_limits(dict(N=2, C=160, H=33))
    assert not v.outside_limits(dict(N=2, C=128, H=128))
    assert v.outside_limits(dict(N=2, C=64, H=150))  # fits the budget, but its tiles spill on sm_90a


@cpu_only
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_model_channels_whole_in_a_program(dtype):
    # C = H = 128, as the models run: the LayerNorms over full rows, two chunks of 64 columns a projection
    name = "fused_r64_h32_w8_x3" if dtype == "fp32" else "fused_r64_h32_cublas"
    r = check(_variant(dtype, name, IN_R=16, FIN_R=16, IN_H=64, FIN_C=64), dict(N=3, C=128, H=128), trials=1,
              device="cpu")
    assert r.passed, r.reason


@cpu_only
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_a_batch_of_complexes_and_strided_inputs(dtype, poisoned):
    shape = dict(N=5, C=6, H=20)
    reqs = [SPEC.inputs(shape, seed=40 + c, dtype=dtype, dist="heavy" if c else "normal") for c in range(3)]
    weights = reqs[0][2:]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    z_s = torch.cat([z, z], -1)[..., ::2].copy_(z)  # every other channel of a wider tensor
    mask_t = mask.transpose(1, 2).contiguous().transpose(1, 2)
    cfg = tb.TILES[dtype]["fused_r64_h32_w8_x3" if dtype == "fp32" else "fused_r64_h32_cublas"]
    for zz, mm, cfg in ((z, mask, cfg), (z_s, mask_t, cfg), (z_s, mask_t, dict(cfg, FIN_ZGATE=True))):  # the gate from z
        out = torch.full_like(z, math.nan)
        assert tb.trimul_block(zz, mm, *weights, out=out, **cfg) is out
        for c, (zc, mc, *_) in enumerate(reqs):
            want = SPEC.reference(zc, mc, *weights)
            assert rel_err(out[c], want) <= SPEC.tol(dtype), (dtype, c, rel_err(out[c], want))
            assert not outside(out[c], want, dtype).any(), (dtype, c, describe_mismatch(out[c], want, dtype))


@cpu_only
def test_rows_past_the_square_root_of_the_float_range(poisoned):
    # pair rows of z near 1e30 (their squares overflow FP32): LayerNorm normalises them all the same, as
    # the project's LayerNorm does; unscaled, their variance was inf and their rows came out as beta alone
    z, mask, *w = SPEC.inputs(dict(N=3, C=20, H=9), seed=5)
    z = z.clone()
    z[0, 1] *= 1e30
    z[2, 2] *= 1e25
    want = SPEC.reference(z, mask, *w)
    got = tb.trimul_block(z, mask, *w, **tb.TILES["fp32"]["fused_r64_h32_w8_x3"])
    assert rel_err(got, want) < SPEC.tol("fp32") and not outside(got, want, "fp32").any()


@cpu_only
@pytest.mark.parametrize("dtype,name", [("fp32", "fused_r64_h32_w8_x3"),
                                        ("bf16", "fused_r64_h32_tma2_r64_fsig_ab_g64_cublas"),
                                        ("bf16", "fused_r64_h32_tma2_r64_fsig_ab_g64_lnf_cublas")])
def test_constant_rows_scaled_far_down(dtype, name, poisoned):
    # a constant pair row is beta after the LayerNorm; scaled down (past 1e21 here) eps s^2 underflowed to 0 beside
    # its variance of 0, and the grid kernel's rows came out NaN (found by a review); at FP32 the row near 3e37 then
    # came out as noise (its mean's rounding read as spread); with IN_LNFAST the row at -3e37 overflows the unscaled
    # sum, the row alternating +-2e19 its squares alone, and their tiles take the scaled form
    z, mask, *w = SPEC.inputs(dict(N=3, C=24, H=9), seed=8, dtype=dtype)
    z[0, 1], z[2, 0] = 1e21, -3e37
    z[1, 2] = 2e19 * (1 - 2 * (torch.arange(24) % 2)).to(z.dtype)
    want = SPEC.reference(z, mask, *w)
    got = tb.trimul_block(z, mask, *w, **dict(tb.TILES[dtype][name], IN_R=16, FIN_R=16))
    assert rel_err(got, want) <= SPEC.tol(dtype) and not outside(got, want, dtype).any(), rel_err(got, want)


@cpu_only
def test_the_fused_road_refuses_what_it_cannot_hold():
    z, mask, *w = SPEC.inputs(dict(N=2, C=4, H=3), seed=1)
    cfg = tb.TILES["fp32"]["fused_r64_h32_w8_x3"]
    for key, value in (("ROAD", "fast"), ("BMM", "cutlass"), ("IN_R", 8), ("FIN_C", 48), ("F_STAGES", 0),
                       ("IN_MAXNREG", 8), ("IN_MAXNREG", 300), ("IN_SIG", "fastest"), ("IN_SIG", "tanh")):
        e = assert_refuses(tb.trimul_block, NAME, "config", z, mask, *w, **dict(cfg, **{key: value}))
        assert key in str(e)
    for over, key in ((dict(IN_JOIN=True, IN_TMA=True, IN_H=256), "IN_H"), (dict(FIN_TMA=True, FIN_C=512), "FIN_C"),
                      (dict(IN_TSTORE=True, IN_R=512), "IN_R"), (dict(FIN_GTMA=True, FIN_C=512), "FIN_C"), (dict(IN_TMA=True, IN_JOIN=False), "IN_JOIN"),
                      (dict(IN_JOIN=True, IN_RESIDENT=True, IN_MAXNREG=96), "IN_MAXNREG"),
                      (dict(IN_JOIN=True, IN_RESIDENT=True, IN_SIG="fast"), "IN_SIG"),
                      (dict(FIN_ZGATE=True, FIN_GTMA=True), "FIN_ZGATE"),
                      (dict(IN_JOIN=True, IN_RESIDENT=True, FIN_ZGATE=True), "FIN_ZGATE"),
                      (dict(IN_AB=True), "IN_AB"), (dict(IN_JOIN=True, IN_TMA=True, IN_AB=True, FIN_ZGATE=True), "IN_AB"),
                      (dict(IN_GC=48), "IN_GC"), (dict(IN_GC=256), "IN_GC"),
                      (dict(IN_JOIN=True, IN_TMA=True, IN_AB=True, IN_H=128), "IN_H")):  # IN_AB's tile: 4 IN_H columns
        e = assert_refuses(tb.trimul_block, NAME, "config", z, mask, *w, **dict(cfg, **over))
        assert key in str(e)  # TMA's tiles stop at 256 a side; its weights come in IN_JOIN's order
    e = assert_refuses(tb.trimul_block, NAME, "config", z, mask, *w, **dict(cfg, BMM="cublas"))
    assert "CONTRACT" in str(e)  # cuBLAS has no tf32x3: the split would be silently dropped
    wide = SPEC.inputs(dict(N=2, C=_fused.MAX_WIDTH + 1, H=3), seed=1)
    e = assert_refuses(tb.trimul_block, NAME, "config", *wide, **cfg)
    assert "ROAD='steps'" in str(e)
    # the steps road takes any width
    assert rel_err(tb.trimul_block(*wide), SPEC.reference(*wide)) < SPEC.tol("fp32")


@gpu
@pytest.mark.parametrize("dtype,name", FUSED, ids=[f"{d}-{n}" for d, n in FUSED])
def test_gpu_fused_configs_at_random_shapes(dtype, name):
    shapes = _held(dtype, name, SPEC.random_shapes(20) + SPEC.awkward + SPEC.shapes["field"])
    assert SPEC.shapes["field"][0] in shapes
    assert not gpu_failures(_variant(dtype, name), shapes)


@triton.jit
def _offsets_probe(OUT, NN, H, CH: tl.constexpr, BLOCK_R: tl.constexpr, OFFS_64: tl.constexpr):
    # the offsets the fused kernels form for the last CH channels (the farthest) of each program's pairs,
    # written to OUT[program, pair, channel]
    rows, cm, rmask, nn = _fused._pairs(NN, H, BLOCK_R, OFFS_64)
    hs = (H - CH) + tl.arange(0, CH)
    at = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R))[:, None] * CH + tl.arange(0, CH)[None, :]
    tl.store(OUT + at, cm[:, None] + hs[None, :] * nn)


@cpu_only
def test_channel_offsets_past_two_to_the_31():
    # N = 4113, H = 128: channel 127 of the first pair is 127 N^2 = 2,148,429,663 elements on, while N^2
    # fits in int32 (the launcher sets OFFS_64 from the copies' size). 32-bit arithmetic wrapped here.
    N, H, R, CH = 4113, 128, 16, 16
    out = torch.zeros((3, R, CH), dtype=torch.int64)
    _offsets_probe[(3,)](out, N * N, H, CH=CH, BLOCK_R=R, OFFS_64=True)
    want = torch.tensor([[[p * R + r + (H - CH + h) * N * N for h in range(CH)] for r in range(R)] for p in range(3)])
    assert torch.equal(out, want)
    assert 127 * N * N >= 2 ** 31 and N * N < 2 ** 31


@cpu_only
def test_programs_walk_complex_by_complex_on_one_grid_axis():
    # three complexes of N = 5 (25 pairs: two programs of 16 each), one grid axis: program p takes tile
    # p % 2 of complex p // 2, and its channel-major offsets start at that complex's H N^2
    NN, R, H = 25, 16, 16
    out = torch.full((6, R, H), -1, dtype=torch.int64)
    _offsets_probe[(6,)](out, NN, H, CH=H, BLOCK_R=R, OFFS_64=False)
    assert [int(out[p, 0, 0]) for p in range(6)] == [b * H * NN + t * R for b in range(3) for t in range(2)]


def _entries_of(ids) -> int:
    """Prepared-weight entries whose first weight has one of these ids: a test counts its own, since another test's
    weights, freed by the collector while it runs, drop theirs (a count of all entries once failed under xdist).
    Ids, not the tensors: a test that frees a weight to see its entry leave holds no reference to it."""
    ids = set(ids)
    return sum(k[1] in ids for k in _fused_weights._PREPARED)


@cpu_only
def test_prepared_weights_follow_in_place_updates_and_leave_with_the_weight():
    # the reordered first-kernel weights are kept while the weight lives: an in-place update must not
    # be answered from the old copy, and a freed weight must not leave its copy behind
    z, mask, *w = SPEC.inputs(dict(N=5, C=16, H=24), seed=4)
    cfg = dict(tb.TILES["fp32"]["fused_r64_h32_w8_x3"], IN_JOIN=True, IN_TMA=True, IN_H=16, FIN_TMA=True, FIN_C=16)
    ids = [id(t) for t in w]  # the weights as they were, before the deletions below
    first = tb.trimul_block(z, mask, *w, **cfg)
    assert rel_err(tb.trimul_block(z, mask, *w, **cfg), SPEC.reference(z, mask, *w)) < SPEC.tol("fp32")
    assert _entries_of(ids) == 2  # the first kernel's and the last's
    w[2].mul_(-0.5)  # w_in
    w[3].add_(1.0)  # b_in
    w[6].mul_(2.0)  # w_out
    again = tb.trimul_block(z, mask, *w, **cfg)
    assert rel_err(again, SPEC.reference(z, mask, *w)) < SPEC.tol("fp32")
    assert rel_err(again, first) > 0.1
    del w[2]
    assert _entries_of(ids) == 1
    del w[5]  # w_out
    assert _entries_of(ids) == 0


@cpu_only
def test_prepared_weights_are_never_stale_nor_kept_where_an_update_could_go_unseen():
    # found by a review: inference tensors crashed the cache (they count no versions), ``.data = ...``
    # reassignments were answered from the old copy, and replaced entries left finalizers behind
    cfg = dict(tb.TILES["fp32"]["fused_r64_h32_w8_x3"], IN_JOIN=True, IN_TMA=True, IN_H=16, FIN_TMA=True, FIN_C=16)
    with torch.inference_mode():
        z, mask, *w = SPEC.inputs(dict(N=4, C=16, H=8), seed=5)
        assert rel_err(tb.trimul_block(z, mask, *w, **cfg), SPEC.reference(z, mask, *w)) < SPEC.tol("fp32")
        assert _entries_of(map(id, w)) == 0
    z, mask, *w = SPEC.inputs(dict(N=4, C=16, H=8), seed=6)
    tb.trimul_block(z, mask, *w, **cfg)
    w[2].data = torch.randn_like(w[2])  # a new storage, no version bump
    assert rel_err(tb.trimul_block(z, mask, *w, **cfg), SPEC.reference(z, mask, *w)) < SPEC.tol("fp32")
    size = len(_fused_weights._PREPARED)
    assert _entries_of(map(id, w)) == 2
    for _ in range(3):  # a fresh bias each call: its entry leaves with it
        b = w[3].clone()
        tb.trimul_block(z, mask, *w[:3], b, *w[4:], **cfg)
        del b
    assert _entries_of(map(id, w)) == 2 and len(_fused_weights._PREPARED) <= size
    w[2].requires_grad_(True)  # autograd records the weights: nothing kept (a p.data update would go unseen)
    before = _entries_of(map(id, w))
    tb.trimul_block(z, mask, *w, **cfg)
    assert _entries_of(map(id, w)) <= before


@cpu_only
def test_tma_stores_stay_inside_each_complex():
    # IN_TSTORE writes a, b and g through descriptors whose tiles are clipped at one complex's pairs and
    # channels: 32 pairs a program over complexes of 16, three of them, outputs poisoned
    cfg = dict(tb.TILES["fp32"]["fused_r64_h32_w8_x3"], IN_TSTORE=True, IN_R=32, IN_H=16)
    z, mask, *w = SPEC.inputs(dict(B=3, N=4, C=16, H=24), seed=7)
    out = torch.full_like(z, float("nan"))
    got = tb.trimul_block(z, mask, *w, out=out, **cfg)
    assert rel_err(got, SPEC.reference(z, mask, *w)) < SPEC.tol("fp32")
    at = torch.empty(3, 24, 4, 4)
    assert all(d is not None for d in _fused_weights.store_descriptors(at, at, torch.empty(48, 16), 3, 16, 16, 24, cfg))
    # 25 pairs of FP32 are 100 bytes a row, not a multiple of 16: the pointer stores serve
    assert _fused_weights.store_descriptors(at, at, torch.empty(75, 16), 3, 25, 16, 24, cfg) == (None, None, None)
