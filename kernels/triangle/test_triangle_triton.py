"""triangle's Triton kernel: every tile config, forced paths, 64-bit offsets at sizes that fit on one
GPU, bad input, the reuse model."""
from __future__ import annotations

import torch

from kernels._triton import common
from kernels._triton.testing import (assert_refuses, check_every_sweep_config, check_forced, cpu_only, module,
                                     rel_err, spec)

OP = "triangle"
SMALL = dict(N=17, C=9)


@cpu_only
def test_every_sweep_config():
    check_every_sweep_config(OP, SMALL)


@cpu_only
def test_forced_one_channel_small_tiles():
    check_forced(OP, dict(BLOCK_C=1, BLOCK_I=16, BLOCK_J=16, BLOCK_K=16), dict(N=33, C=5))


class _Recorder:
    def __init__(self):
        self.kwargs = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = kwargs
        return launch


def _launch_constants(monkeypatch, N, C):
    rec = _Recorder()
    monkeypatch.setattr(module(OP), "_triangle_kernel", rec)
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    A = torch.empty(N, N, C, device="meta")
    module(OP).triangle(A, torch.empty(N, N, C, device="meta"))
    return rec.kwargs


def test_offsets_go_64_bit_where_int32_would_wrap(monkeypatch):
    # N = 2000, C = 600: i times its stride (N * C) passes 2^31; each operand is 9.6 GB, which fits
    assert _launch_constants(monkeypatch, 2000, 600)["OFFS_64"]
    for s in spec(OP).shapes["field"] + spec(OP).shapes["large"]:
        assert not _launch_constants(monkeypatch, s["N"], s["C"])["OFFS_64"], s


@cpu_only
def test_64_bit_path_computes_the_same(monkeypatch):
    monkeypatch.setattr(common, "offsets_64", lambda *t: True)
    check_forced(OP, dict(BLOCK_C=2, BLOCK_I=16, BLOCK_J=16, BLOCK_K=16, PER_CHANNEL=True), dict(N=19, C=5))
    check_forced(OP, dict(BLOCK_C=4, BLOCK_I=16, BLOCK_J=16, BLOCK_K=16), dict(N=19, C=5))


def test_bad_inputs_name_op_and_argument():
    fn = module(OP).triangle
    assert_refuses(fn, OP, "A", torch.ones(3, 4, 2), torch.ones(3, 4, 2))
    assert_refuses(fn, OP, "B", torch.ones(3, 3, 2), torch.ones(3, 3, 1))
    assert_refuses(fn, OP, "out", torch.ones(3, 3, 2), torch.ones(3, 3, 2), out=torch.empty(3, 3, 1))


def test_per_channel_needs_2_or_4_channels():
    A, B = spec(OP).inputs(dict(N=4, C=8))
    e = assert_refuses(module(OP).triangle, OP, "config", A, B, PER_CHANNEL=True, BLOCK_C=8)
    assert "PER_CHANNEL" in str(e)


def test_reuse_counts():
    assert spec(OP).reuse(dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=8))["fmas_per_load"] == 32.0


@cpu_only
def test_custom_op_runs_eagerly():
    A, B = spec(OP).inputs(dict(N=5, C=3))
    assert rel_err(torch.ops.mage.triton_triangle(A, B), spec(OP).reference(A, B)) < 1e-6
