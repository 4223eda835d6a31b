"""matmul's Triton kernel: every tile config of every precision the interpreter runs, both layouts of
B, forced paths, 64-bit offsets at sizes that fit on one GPU, bad input, the reuse model; on a GPU,
that the FP32 and fp32x3 kernels are really FP32-accurate (a TF32 slip fails), up to K = 8192."""
from __future__ import annotations

import functools

import pytest
import torch

from kernels._triton import common
from tests.support.kernel_checks import (assert_refuses, check_every_sweep_config, check_forced, cpu_only, gpu,
                                     impl, module, rel_err, spec, variant)
from mage import facets
from mage.check import check

OP = "matmul"
SMALL = dict(M=67, K=45, N=33)
LARGE = dict(M=4096, K=4096, N=4096)  # sizes whose tiles the GPU tests check (the chosen ones there)


@cpu_only
@pytest.mark.parametrize("dtype", ["fp32", "fp32x3", "tf32"])
def test_every_sweep_config(dtype):
    # the tensor-core sweeps hold both layouts of B; the interpreter computes their dots in FP32, so
    # this checks indexing and the K-major copy, not precision (the GPU tests below do that)
    check_every_sweep_config(OP, SMALL, dtype)


@cpu_only
@pytest.mark.parametrize("dtype", ["fp32x3", "tf32"])
@pytest.mark.parametrize("kmajor", [0, 1])
def test_both_layouts_of_b_at_awkward_shapes(dtype, kmajor):
    small = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=3, B_KMAJOR=kmajor)
    for shape in spec(OP).awkward + [dict(M=100, K=70, N=50)]:
        for dist in ("normal", "heavy"):
            r = check(variant(OP, dtype, **small), shape, trials=2, dist=dist, device="cpu")
            assert r.passed, f"{dtype} B_KMAJOR={kmajor} {shape} {dist}: {r.reason}"


@cpu_only
def test_a_b_already_k_major_is_read_in_place(monkeypatch):
    A, B = spec(OP).inputs(dict(M=9, K=20, N=7))
    Bt = B.t().contiguous().t()  # [K, N] with K contiguous: a transposed view, no copy needed
    want = A.double() @ B.double()
    got = module(OP).matmul(A, Bt, dtype="fp32x3", B_KMAJOR=1)
    assert rel_err(got, want) < 1e-6
    seen = _launch_constants(monkeypatch, A, Bt, dtype="fp32x3", B_KMAJOR=1)
    assert seen["args"][1].data_ptr() == Bt.data_ptr() and seen["args"][8:10] == (1, 20)


@cpu_only
def test_forced_small_tiles_and_groups():
    check_forced(OP, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=3), dict(M=100, K=70, N=50))


class _Recorder:
    """Stands in for the compiled kernel: records the constants a launch would get, launches nothing."""

    def __init__(self):
        self.kwargs = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = dict(kwargs, args=args)
        return launch


def _launch_constants(monkeypatch, *tensors, **config):
    rec = _Recorder()
    monkeypatch.setattr(module(OP), "_matmul_kernel", rec)
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    module(OP).matmul(*tensors, **config)
    monkeypatch.undo()
    return rec.kwargs


@cpu_only
def test_a_precision_swap_reaches_the_kernel_after_the_plan_is_memoised(monkeypatch):
    # The GPU's slip test swaps PRECISION after a first call has memoised the launcher's plan: the
    # swap must reach the kernel (a plan that held the resolved road ran tf32x3 again, and the test
    # saw no slip). The interpreter computes both roads' dots in FP32, so the constant is what it sees.
    seen = []
    launch = common.launch
    monkeypatch.setattr(common, "launch", lambda kernel, grid, *a, **kw: seen.append(kw["PRECISION"])
                        or launch(kernel, grid, *a, **kw))
    im = variant(OP, "fp32x3")
    A, B = spec(OP).inputs(SMALL)
    for _ in range(2):  # the second call finds the memoised plan
        im.fn(A, B)
    monkeypatch.setitem(module(OP).PRECISION, "fp32x3", "tf32")
    got = im.fn(A, B)
    assert seen == ["tf32x3", "tf32x3", "tf32"], seen
    assert rel_err(got, A.double() @ B.double()) < 1e-5


def test_offsets_go_64_bit_where_int32_would_wrap(monkeypatch):
    # 46341^2 > 2^31: a 46341 x 46341 FP32 operand (8.6 GB) fits on an H200; no memory is allocated
    big = torch.empty(46341, 46341, device="meta")
    assert common.offsets_64(big) and not common.offsets_64(torch.empty(46340, 46340, device="meta"))
    assert _launch_constants(monkeypatch, big, torch.empty(46341, 8, device="meta"))["OFFS_64"]
    # a transposed B: its column index runs over the long stride
    bt = torch.empty(8, 46341 * 46341 // 8 + 1, device="meta").t()
    assert _launch_constants(monkeypatch, torch.empty(4, bt.shape[0], device="meta"), bt)["OFFS_64"]
    # the measured shapes keep the 32-bit instructions
    for s in spec(OP).shapes["field"] + spec(OP).shapes["large"]:
        A, B = (torch.empty(s["M"], s["K"], device="meta"), torch.empty(s["K"], s["N"], device="meta"))
        assert not _launch_constants(monkeypatch, A, B)["OFFS_64"], s


@cpu_only
def test_64_bit_path_computes_the_same(monkeypatch):
    monkeypatch.setattr(common, "offsets_64", lambda *t: True)
    check_forced(OP, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=3), dict(M=37, K=20, N=19))
    A, B = spec(OP).inputs(dict(M=9, K=20, N=7))
    got = module(OP).matmul(A, B.t().contiguous().t())  # strided B through the 64-bit path
    assert rel_err(got, A.double() @ B.double()) < 1e-6


def test_bad_inputs_name_op_and_argument():
    fn = module(OP).matmul
    assert_refuses(fn, OP, "B", torch.ones(3, 4), torch.ones(5, 2))
    assert_refuses(fn, OP, "A", torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 2))
    assert_refuses(fn, OP, "A", torch.ones(3), torch.ones(3, 2))
    assert_refuses(fn, OP, "A", torch.ones(3, 4), torch.ones(4, 2), dtype="bf16")
    assert_refuses(fn, OP, "out", torch.ones(3, 4), torch.ones(4, 2), out=torch.empty(1, 1))
    assert_refuses(fn, OP, "dtype", torch.ones(3, 4), torch.ones(4, 2), dtype="fp16")
    assert_refuses(fn, OP, "A", torch.ones(3, 4, dtype=torch.bfloat16), torch.ones(4, 2, dtype=torch.bfloat16),
                   dtype="fp32x3")
    assert_refuses(fn, OP, "config", torch.ones(3, 4), torch.ones(4, 2), dtype="fp32x3", B_KMAJOR=2)
    assert_refuses(fn, OP, "config", torch.ones(3, 4), torch.ones(4, 2), B_KMAJOR=1)  # FMA row: N-major only


def test_kmajor_launch_passes_a_copy_with_swapped_strides(monkeypatch):
    A, B = torch.empty(64, 48, device="meta"), torch.empty(48, 40, device="meta")
    n_major = _launch_constants(monkeypatch, A, B, dtype="tf32", B_KMAJOR=0)
    k_major = _launch_constants(monkeypatch, A, B, dtype="tf32", B_KMAJOR=1)
    assert n_major["args"][8:10] == (40, 1) and n_major["args"][1] is B
    assert k_major["args"][8:10] == (1, 48) and tuple(k_major["args"][1].shape) == (40, 48)
    assert "B_KMAJOR" not in k_major and k_major["PRECISION"] == "tf32"
    assert _launch_constants(monkeypatch, A, B, dtype="fp32x3")["PRECISION"] == "tf32x3"


def test_tensor_core_configs_fit_in_shared_memory():
    # cp.async stages of both operand tiles: over 227 KB a block, the launch fails on Hopper
    for dtype in ("fp32x3", "tf32", "bf16"):
        table = module(OP).TILES[dtype]
        size = 2 if dtype == "bf16" else 4
        for c in table.configs.values():
            stage = (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * size
            assert stage * c["num_stages"] <= 227 * 1024, (dtype, c)
            assert set(c) == set(table.base_config()), (dtype, c)


def test_reuse_counts():
    r = facets.of(OP).reuse(dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16))
    assert (r["loads"], r["fmas"], r["fmas_per_load"]) == (512, 4096, 8.0)
    assert facets.of(OP).reuse(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32))["fmas_per_load"] == 64.0


@cpu_only
def test_custom_op_runs_eagerly():
    A, B = spec(OP).inputs(dict(M=9, K=20, N=7))
    for dtype in ("fp32", "fp32x3"):
        assert torch.allclose(torch.ops.mage.triton_matmul(A, B, dtype), A @ B, atol=1e-5)


def fp32_error(im, K=8192, seed=0, dist="normal"):
    """Relative error against float64 of ``im`` (output poisoned with NaN first) at a K where TF32's
    10-bit mantissa shows: about 1e-4 and more, against an FP32 tolerance of 5e-5. The interpreter
    computes every dot in FP32, so only a GPU can tell the two apart."""
    A, B = spec(OP).inputs(dict(M=256, K=K, N=256), seed=seed, device="cuda", dist=dist)
    out = torch.full((256, 256), float("nan"), device="cuda")
    got = im.fn(A, B, out=out)
    assert got is out and not torch.isnan(out).any(), "output not fully written"
    return rel_err(out, A.double() @ B.double())


@gpu
@pytest.mark.parametrize("cfg", ["default", "large", "first"])
def test_gpu_fp32_is_not_tf32(cfg):
    # The check proves it can fail: the deliberately TF32 build of the same kernel must miss the
    # FP32 tolerance that every FP32 config meets.
    tol = spec(OP).tol("fp32")
    tf32 = fp32_error(impl(OP, "tf32"))
    assert tf32 > tol, f"the TF32 build passed the FP32 check ({tf32:.2e}): the test cannot see a slip"
    im = {"default": impl(OP), "large": variant(OP, **module(OP).TILES["fp32"].choose(LARGE)),
          "first": variant(OP, **module(OP).FIRST)}[cfg]
    err = fp32_error(im)
    assert err < tol, f"FP32 Triton matmul ({cfg}) is off by {err:.2e} (TF32 gives {tf32:.2e})"


@gpu
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("K", [1023, 4096, 8192])
@pytest.mark.parametrize("kmajor", [0, 1])
def test_gpu_fp32x3_is_fp32_accurate(K, dist, kmajor):
    tol = spec(OP).tol("fp32x3")
    configs = {"default": impl(OP, "fp32x3").config_at(dict(M=256, K=K, N=256)),
               "large": module(OP).TILES["fp32x3"].choose(LARGE), "first": module(OP).TILES["fp32x3"].sweep_configs()[0]}
    for cfg, tiles in configs.items():
        err = fp32_error(variant(OP, "fp32x3", **dict(tiles, B_KMAJOR=kmajor)), K=K, dist=dist)
        assert err < tol, f"fp32x3 ({cfg}, B_KMAJOR={kmajor}) K={K} {dist}: off by {err:.2e}, tolerance {tol:.0e}"


@gpu
@pytest.mark.parametrize("kmajor", [0, 1])
def test_gpu_fp32x3_tf32_slip_fails(monkeypatch, kmajor):
    # The same launcher with tf32x3 swapped for plain tf32, as a one-word slip would do: it must miss
    # the FP32 tolerance that the fp32x3 build meets at K = 4096, or no test would see the slip.
    tol = spec(OP).tol("fp32x3")
    im = variant(OP, "fp32x3", **dict(module(OP).TILES["fp32x3"].choose(LARGE), B_KMAJOR=kmajor))
    good = fp32_error(im, K=4096)
    monkeypatch.setitem(module(OP).PRECISION, "fp32x3", "tf32")
    slipped = fp32_error(im, K=4096)
    assert slipped > tol, f"a TF32 build passed the FP32 check ({slipped:.2e}): the test cannot see a slip"
    assert good < tol, f"fp32x3 is off by {good:.2e} (the TF32 build: {slipped:.2e})"


@gpu
def test_gpu_kmajor_copy_is_one_more_launch():
    # the copy is part of the call and its time counts; a B that is already K-major is not copied
    from mage.profile import profile
    A, B = spec(OP).inputs(dict(M=512, K=384, N=256), device="cuda")
    cfg = module(OP).TILES["fp32x3"].choose(LARGE)
    for b, kmajor, want in ((B, 0, 1), (B, 1, 2), (B.t().contiguous().t(), 1, 1)):
        call = functools.partial(variant(OP, "fp32x3", **dict(cfg, B_KMAJOR=kmajor)).fn, A, b)
        assert profile(call, iters=3, warmup=1).launches == want, (kmajor, b.stride())
