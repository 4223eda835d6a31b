"""triangle's Triton kernels: every tile config of both precisions, both roads (in place, and the
channel-major copies with each output epilogue) at awkward shapes with poisoned outputs and
heavy-tailed inputs, strided inputs, 64-bit offsets, bad input and bad configs; on a GPU, FP32
accuracy against float64 up to N = 384, C = 128 and at random shapes."""
from __future__ import annotations

import itertools

import pytest
import torch

from kernels._triton import common
from tests.support.kernel_checks import (assert_refuses, check_every_sweep_config, check_forced, cpu_only, gpu,
                                     module, rel_err, spec)
from mage import facets
from mage.check import check

OP = "triangle"
SMALL = dict(N=17, C=9)
DTYPES = ("fp32", "fp32x3")


def _cfg(layout, store="direct", k_inner=True, **tiles):
    base = dict(LAYOUT=layout, STORE=store, K_INNER=k_inner, BLOCK_I=16, BLOCK_J=16, BLOCK_K=16, BLOCK_C=1,
                GROUP_I=2, PER_CHANNEL=False)
    return {**base, **tiles}


# one config of each road and epilogue, with tiles small enough for the interpreter
ROADS = {
    "in_place": _cfg("in_place"),
    "in_place_per_channel": _cfg("in_place", BLOCK_C=4, PER_CHANNEL=True),
    "permute_k_inner": _cfg("channel_major", "permute"),
    "permute_ij_inner": _cfg("channel_major", "permute", k_inner=False),
    "direct_scatter": _cfg("channel_major", "direct"),
    "direct_4_channels": _cfg("channel_major", "direct", k_inner=False, BLOCK_C=4),
}
AWKWARD = [dict(N=n, C=c) for n, c in itertools.product((1, 3, 17, 33), (1, 3, 5, 16))]


def _variant(dtype, config):
    from tests.support.kernel_checks import variant
    return variant(OP, dtype, **config)


@cpu_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_sweep_config(dtype):
    check_every_sweep_config(OP, SMALL, dtype)


def _road_cases():
    """Every road at every awkward shape. The fast tier takes C = 1 and C = 5 (one channel; a full block of
    four and a partial one) at every N (no tile, a partial tile, a partial group of tiles at N = 33); C = 3
    and C = 16 add nothing the tiles see differently and run in the full tier."""
    for road in sorted(ROADS):
        for n, shape in enumerate(AWKWARD):
            dtype = DTYPES[(n + n // 4) % 2]  # alternates along N and along C: both precisions in each tier
            yield pytest.param(road, shape, dtype, id=f"{road}-{dtype}-N={shape['N']},C={shape['C']}",
                               marks=[pytest.mark.slow] if shape["C"] in (3, 16) else [])


@cpu_only
@pytest.mark.parametrize("road, shape, dtype", list(_road_cases()))
def test_roads_at_awkward_shapes(road, shape, dtype):
    # the interpreter ignores input_precision, so these check indexing, masks and the epilogues; the
    # precisions' arithmetic is checked on the GPU below
    r = check(_variant(dtype, ROADS[road]), shape, trials=1, dist="heavy", device="cpu")
    assert r.passed, f"{road} {dtype} {shape}: {r.reason}"


@cpu_only
def test_forced_one_channel_small_tiles():
    check_forced(OP, _cfg("in_place"), dict(N=33, C=5))


def _strided_inputs(N, C):
    g = torch.Generator().manual_seed(3)
    A = torch.randn(N, C, N, generator=g).permute(0, 2, 1)  # channels not innermost
    B = torch.randn(N, N, 2 * C, generator=g)[:, :, ::2]  # every other channel
    row = torch.randn(1, N, C, generator=g).expand(N, N, C)  # stride 0 over i
    return [(A, B), (row, B), (B.transpose(0, 1), A)]


@cpu_only
@pytest.mark.parametrize("road", sorted(ROADS))
def test_strided_inputs(road):
    for A, B in _strided_inputs(19, 6):
        assert not A.is_contiguous() and not B.is_contiguous()
        got = module(OP).triangle(A, B, **ROADS[road])
        assert rel_err(got, spec(OP).reference(A, B)) < spec(OP).tol("fp32"), road


class _Recorder:
    """Stands in for a kernel: records each launch's grid and keyword arguments."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, kwargs))
        return launch


def _launches(monkeypatch, N, C, A=None, **config):
    recs = {name: _Recorder() for name in ("_triangle_kernel", "_transpose_kernel", "_batched_gemm_kernel")}
    monkeypatch.setattr(module(OP), "_triangle_kernel", recs["_triangle_kernel"])
    monkeypatch.setattr(module(OP).road, "_transpose_kernel", recs["_transpose_kernel"])
    monkeypatch.setattr(module(OP).road, "_batched_gemm_kernel", recs["_batched_gemm_kernel"])
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    A = torch.empty(N, N, C, device="meta") if A is None else A
    module(OP).triangle(A, torch.empty(N, N, C, device="meta"), **config)
    return {k: r.calls for k, r in recs.items() if r.calls}


def test_offsets_go_64_bit_where_int32_would_wrap(monkeypatch):
    # N = 2000, C = 600: i times its stride (N * C) passes 2^31; each operand is 9.6 GB, which fits
    for layout, store in (("in_place", "direct"), ("channel_major", "permute")):
        for calls in _launches(monkeypatch, 2000, 600, LAYOUT=layout, STORE=store).values():
            assert all(kw["OFFS_64"] for _, kw in calls), layout
        for s in spec(OP).shapes["field"] + spec(OP).shapes["large"]:
            for calls in _launches(monkeypatch, s["N"], s["C"], LAYOUT=layout, STORE=store).values():
                assert not any(kw["OFFS_64"] for _, kw in calls), (layout, s)


def test_channel_major_scratch_offsets_count_even_when_the_input_is_small(monkeypatch):
    # an expanded A reaches few addresses, but its [C, N, N] copy holds every element
    A = torch.empty(1, 1, 600, device="meta").expand(2000, 2000, 600)
    calls = _launches(monkeypatch, 2000, 600, A=A, LAYOUT="channel_major")
    assert all(kw["OFFS_64"] for c in calls.values() for _, kw in c)


@pytest.mark.parametrize("road,launches", [("in_place", 1), ("direct_scatter", 2), ("permute_k_inner", 3)])
def test_launches_per_road(monkeypatch, road, launches):
    calls = _launches(monkeypatch, 40, 8, **{k: v for k, v in ROADS[road].items()})
    assert sum(len(c) for c in calls.values()) == launches


@pytest.mark.parametrize("dtype,want", [("fp32", "ieee"), ("fp32x3", "tf32x3")])
def test_precision_reaches_every_dot(monkeypatch, dtype, want):
    for road in ("in_place", "direct_scatter"):
        calls = _launches(monkeypatch, 40, 8, dtype=dtype, **ROADS[road])
        kernel = "_triangle_kernel" if road == "in_place" else "_batched_gemm_kernel"
        assert calls[kernel][0][1]["PRECISION"] == want


@pytest.mark.parametrize("dtype", DTYPES)
def test_channel_groups_cover_every_channel(monkeypatch, dtype):
    # one program per (channel group, tile): C = 9 in groups of 4 is 3 groups of 3 x 3 tiles
    calls = _launches(monkeypatch, 40, 9, dtype=dtype, **{**ROADS["direct_4_channels"]})
    assert calls["_batched_gemm_kernel"][0][0] == (3 * 3 * 3,)


def test_bad_inputs_name_op_and_argument():
    fn = module(OP).triangle
    assert_refuses(fn, OP, "A", torch.ones(3, 4, 2), torch.ones(3, 4, 2))
    assert_refuses(fn, OP, "B", torch.ones(3, 3, 2), torch.ones(3, 3, 1))
    assert_refuses(fn, OP, "out", torch.ones(3, 3, 2), torch.ones(3, 3, 2), out=torch.empty(3, 3, 1))
    assert_refuses(fn, OP, "dtype", torch.ones(3, 3, 2), torch.ones(3, 3, 2), dtype="tf32")


@pytest.mark.parametrize("config,words", [
    (dict(PER_CHANNEL=True, BLOCK_C=8, LAYOUT="in_place", STORE="direct"), "PER_CHANNEL"),
    (dict(PER_CHANNEL=True, BLOCK_C=4, LAYOUT="channel_major"), "PER_CHANNEL"),
    (dict(LAYOUT="sideways"), "LAYOUT"),
    (dict(LAYOUT="channel_major", STORE="scatter"), "STORE"),
    (dict(LAYOUT="in_place", STORE="permute"), "STORE"),
    (dict(LAYOUT="channel_major", BLOCK_C=3), "power of two"),
])
def test_bad_configs_are_refused(config, words, monkeypatch):
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # refused before any launch
    A, B = torch.empty(4, 4, 8, device="meta"), torch.empty(4, 4, 8, device="meta")
    e = assert_refuses(module(OP).triangle, OP, "config", A, B, **config)
    assert words in str(e)


def test_reuse_counts():
    assert facets.of(OP).reuse(dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=8))["fmas_per_load"] == 32.0


def test_every_config_names_its_road():
    mod = module(OP)
    for dtype, table in mod.TILES.items():
        for cfg in table.configs.values():
            assert set(cfg) == set(mod.FIRST), (dtype, cfg)
            assert cfg["LAYOUT"] in mod.LAYOUTS and cfg["STORE"] in mod.STORES


@cpu_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_custom_op_runs_eagerly(dtype):
    A, B = spec(OP).inputs(dict(N=5, C=3))
    assert rel_err(torch.ops.mage.triton_triangle(A, B, dtype), spec(OP).reference(A, B)) < 1e-6
    if dtype == "fp32":
        assert rel_err(torch.ops.mage.triton_triangle(A, B), spec(OP).reference(A, B)) < 1e-6


# ---- GPU ----------------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_every_sweep_config_at_the_large_shape(dtype):
    # FP32 tolerance against float64 for every config the sweep may pick, normal and heavy-tailed
    large = spec(OP).shapes["large"][0]
    bad = []
    for cfg in module(OP).TILES[dtype].sweep_configs():
        for dist in ("normal", "heavy"):
            r = check(_variant(dtype, cfg), large, trials=1, dist=dist, device="cuda")
            if not r.passed:
                bad.append((cfg, dist, r.reason))
    assert not bad, bad[:3]


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("road", ["in_place", "permute", "direct_scatter", "direct_channels"])
def test_gpu_roads_at_random_and_awkward_shapes(dtype, road):
    # the GPU sweep's own tiles for each road (the interpreter's 16 x 16 tiles are not what runs here)
    sweep = module(OP).TILES[dtype].sweep_configs()
    pick = {"in_place": lambda c: c["LAYOUT"] == "in_place",
            "permute": lambda c: c["STORE"] == "permute",
            "direct_scatter": lambda c: c["LAYOUT"] == "channel_major" and c["STORE"] == "direct" and c["BLOCK_C"] == 1,
            "direct_channels": lambda c: c["LAYOUT"] == "channel_major" and c["BLOCK_C"] > 1}[road]
    cfg = next(c for c in sweep if pick(c))
    shapes = spec(OP).random_shapes(30) + AWKWARD + [dict(N=384, C=128), dict(N=383, C=127), dict(N=200, C=33)]
    bad = [(s, r.reason) for s in shapes for r in [check(_variant(dtype, cfg), s, trials=1, dist="heavy", device="cuda")]
           if not r.passed]
    assert not bad, bad[:5]


@gpu
def test_gpu_fp32x3_is_fp32_class_and_strided_inputs_agree():
    # three TF32 products keep FP32-class error (plain TF32 would sit near 1e-4); the channel-major
    # copies read any strides
    large = spec(OP).shapes["large"][0]
    A, B = spec(OP).inputs(large, seed=2, device="cuda", dist="heavy")
    ref = spec(OP).reference(A, B)
    for dtype in DTYPES:
        assert rel_err(module(OP).triangle(A, B, dtype=dtype), ref) < 5e-6, dtype
    # strided inputs compile new specialisations, so the chosen configs only (the sweep's are above)
    for A, B in _strided_inputs(96, 40):
        A, B = A.cuda(), B.cuda()
        ref = spec(OP).reference(A, B)
        for dtype, table in module(OP).TILES.items():
            for cfg in [table[table.base]] + [table[name] for name, _ in table.rule]:  # all the rule chooses
                assert rel_err(module(OP).triangle(A, B, dtype=dtype, **cfg), ref) < spec(OP).tol(dtype), (dtype, cfg)
