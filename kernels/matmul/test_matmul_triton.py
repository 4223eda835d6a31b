"""matmul's Triton kernel: every tile config, forced paths, 64-bit offsets at sizes that fit on one GPU,
bad input, the reuse model; on a GPU, that the FP32 kernel is really FP32 (no TF32 slip)."""
from __future__ import annotations

import pytest
import torch

from kernels._triton import common
from kernels._triton.testing import (assert_refuses, check_every_sweep_config, check_forced, cpu_only, gpu,
                                     impl, module, rel_err, spec, variant)

OP = "matmul"
SMALL = dict(M=67, K=45, N=33)


@cpu_only
def test_every_sweep_config():
    check_every_sweep_config(OP, SMALL)


@cpu_only
def test_forced_small_tiles_and_groups():
    check_forced(OP, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=3), dict(M=100, K=70, N=50))


class _Recorder:
    """Stands in for the compiled kernel: records the constants a launch would get, launches nothing."""

    def __init__(self):
        self.kwargs = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = kwargs
        return launch


def _launch_constants(monkeypatch, *tensors):
    rec = _Recorder()
    monkeypatch.setattr(module(OP), "_matmul_kernel", rec)
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    module(OP).matmul(*tensors)
    return rec.kwargs


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


def test_reuse_counts():
    r = spec(OP).reuse(dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16))
    assert (r["loads"], r["fmas"], r["fmas_per_load"]) == (512, 4096, 8.0)
    assert spec(OP).reuse(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32))["fmas_per_load"] == 64.0


@cpu_only
def test_custom_op_runs_eagerly():
    A, B = spec(OP).inputs(dict(M=9, K=20, N=7))
    assert torch.allclose(torch.ops.mage.triton_matmul(A, B, "fp32"), A @ B, atol=1e-5)


def fp32_error(im, K=8192, seed=0):
    """Relative error against float64 of ``im`` at a K where TF32's 10-bit mantissa shows: about
    1e-4, against an FP32 tolerance of 5e-5. The interpreter computes every dot in FP32, so only
    a GPU can tell the two apart."""
    A, B = spec(OP).inputs(dict(M=256, K=K, N=256), seed=seed, device="cuda")
    return rel_err(im.fn(A, B), A.double() @ B.double())


@gpu
@pytest.mark.parametrize("cfg", ["default", "large", "first"])
def test_gpu_fp32_is_not_tf32(cfg):
    # The check proves it can fail: the deliberately TF32 build of the same kernel must miss the
    # FP32 tolerance that every FP32 config meets.
    tol = spec(OP).tol("fp32")
    tf32 = fp32_error(impl(OP, "tf32"))
    assert tf32 > tol, f"the TF32 build passed the FP32 check ({tf32:.2e}): the test cannot see a slip"
    im = {"default": impl(OP), "large": variant(OP, **module(OP).DEFAULTS["fp32"]["large"]),
          "first": variant(OP, **module(OP).FIRST)}[cfg]
    err = fp32_error(im)
    assert err < tol, f"FP32 Triton matmul ({cfg}) is off by {err:.2e} (TF32 gives {tf32:.2e})"
