"""The triangle update's persistent first kernel with w_in in shared memory and z's tiles pipelined (``_fused_pipe``,
config key ``IN_PIPE``), and its last kernel in that shape (``FIN_PIPE``): their refusals and limits, a batch of
complexes walked by a few programs against float64, and the grid rule's answer at the same inputs. Every such config
of the table is also in ``test_trimul_block_fused.py``'s
awkward-shape and GPU tests, and compiled for sm_90a in ``..._sm90.py``."""
from __future__ import annotations

import math

import pytest
import torch

from kernels.trimul_block import _fused_pipe
from kernels.trimul_block import triton_block as tb
from mage import ops, registry
from mage.check import describe_mismatch, outside
from tests.support.kernel_checks import Counted, assert_refuses, cpu_only, rel_err

NAME = "trimul_block"
SPEC = ops.OPS[NAME]
PIPE = [n for n in tb.TILES["bf16"].configs if tb.TILES["bf16"][n]["IN_PIPE"]]
OPIPE = [n for n in tb.TILES["bf16"].configs if tb.TILES["bf16"][n]["FIN_PIPE"]]
RULE = "fused_r64_h32_tma2_r64_fsig_ab_g64_cublas"


def test_the_table_lists_pipelined_configs():
    assert PIPE and all(tb.TILES["bf16"][n]["IN_AB"] for n in PIPE)
    assert OPIPE and all(tb.TILES["bf16"][n]["FIN_TMA"] for n in OPIPE)


@cpu_only
def test_the_pipelined_first_kernel_refuses_fp32_and_keys_it_does_not_read():
    cfg = tb.TILES["bf16"][PIPE[0]]
    e = assert_refuses(tb.trimul_block, NAME, "config", *SPEC.inputs(dict(N=2, C=8, H=8), seed=1), **cfg)
    assert "IN_PIPE" in str(e) and "bf16" in str(e)
    bf = SPEC.inputs(dict(N=2, C=8, H=8), seed=1, dtype="bf16")
    for key, val in (("IN_AB", False), ("IN_TSTORE", True), ("IN_GC", 64), ("IN_LNFAST", True), ("IN_MAXNREG", 96),
                     ("IN_PIPE", 4)):
        e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, **{key: val}))
        assert key in str(e) or "IN_PIPE" in str(e), (key, str(e))


@cpu_only
def test_its_limits_are_the_weights_it_holds():
    v = registry.get(NAME, "triton", "bf16").variant(**tb.TILES["bf16"][PIPE[0]])
    assert not v.outside_limits(dict(N=2, C=128, H=128))  # the models' channels
    assert not v.outside_limits(dict(N=2, C=7, H=9))
    assert "H = 129" in v.outside_limits(dict(N=2, C=128, H=129))  # past four tiles of IN_H = 32
    assert "shared memory" in v.outside_limits(dict(N=2, C=160, H=33))  # w_in's five tiles at 256 columns
    wide = SPEC.inputs(dict(N=2, C=160, H=33), seed=1, dtype="bf16")
    e = assert_refuses(tb.trimul_block, NAME, "config", *wide, **tb.TILES["bf16"][PIPE[0]])
    assert "IN_PIPE" in str(e) and "shared memory" in str(e)


@cpu_only
@pytest.mark.parametrize("name", PIPE)
def test_a_batch_of_complexes_walked_by_a_few_programs(name, poisoned, monkeypatch):
    _walk_a_batch(monkeypatch, "_in_pipe_kernel", dict(tb.TILES["bf16"][name], IN_R=16), seed=40)


@cpu_only
@pytest.mark.parametrize("shape", (dict(N=5, C=24, H=70), dict(N=3, C=128, H=128)))
def test_the_rules_answer_at_the_same_inputs(shape):
    # the same formula as the grid rule's IN_AB path: under the interpreter, the same bits
    args = SPEC.inputs(shape, seed=7, dtype="bf16", dist="heavy")
    rule = tb.trimul_block(*args, **dict(tb.TILES["bf16"][RULE], IN_R=16))
    assert torch.equal(tb.trimul_block(*args, **dict(tb.TILES["bf16"][PIPE[0]], IN_R=16)), rule)


@cpu_only
def test_the_pipelined_last_kernel_refuses_fp32_and_keys_it_does_not_read():
    cfg = tb.TILES["bf16"][OPIPE[0]]
    e = assert_refuses(tb.trimul_block, NAME, "config", *SPEC.inputs(dict(N=2, C=8, H=8), seed=1), **cfg)
    assert "FIN_PIPE" in str(e) and "bf16" in str(e)
    bf = SPEC.inputs(dict(N=2, C=8, H=8), seed=1, dtype="bf16")
    for key, val in (("FIN_TMA", False), ("FIN_T", True), ("FIN_GTMA", True), ("FIN_PIPE", 4)):
        e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, **{key: val}))
        assert "FIN_PIPE" in str(e), (key, str(e))
    # the gate from z reads IN_AB's layout of w_in; without FIN_PIPE, the grid last kernel does not
    e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, FIN_ZGATE=True, IN_AB=False))
    assert "IN_AB" in str(e)
    e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, FIN_ZGATE=True, FIN_PIPE=0))
    assert "FIN_ZGATE" in str(e)


@cpu_only
def test_the_pipelined_last_kernels_limit_is_its_shared_memory():
    v = registry.get(NAME, "triton", "bf16").variant(**tb.TILES["bf16"][OPIPE[0]])
    assert not v.outside_limits(dict(N=2, C=128, H=128))
    assert "FIN_PIPE" in v.outside_limits(dict(N=2, C=256, H=256))  # w_out alone is 128 KB, two stages as much again
    wide = SPEC.inputs(dict(N=2, C=256, H=256), seed=1, dtype="bf16")
    e = assert_refuses(tb.trimul_block, NAME, "config", *wide, **tb.TILES["bf16"][OPIPE[0]])
    assert "FIN_PIPE" in str(e) and "shared memory" in str(e)


@cpu_only
@pytest.mark.parametrize("name", OPIPE)
def test_the_last_kernel_walks_a_batch_of_complexes_on_a_few_programs(name, poisoned, monkeypatch):
    _walk_a_batch(monkeypatch, "_out_pipe_kernel", dict(tb.TILES["bf16"][name], IN_R=16, FIN_R=16), seed=50)


def _walk_a_batch(monkeypatch, kernel: str, cfg: dict, seed: int):
    # three complexes of 25 pairs, 16 a tile: 6 tiles, two of them clipped at their complex's end, walked by the
    # interpreter's 3 programs (two tiles each) of the pipelined ``kernel``; H = 70, two chunks of 32 and a third
    # part-filled, the fourth all padding; C = 24, padded; rows near 1e30 and a constant row
    calls = []
    monkeypatch.setattr(_fused_pipe, kernel, Counted(getattr(_fused_pipe, kernel), calls))
    reqs = [SPEC.inputs(dict(N=5, C=24, H=70), seed=seed + c, dtype="bf16", dist="heavy" if c else "normal")
            for c in range(3)]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    z[1, 0, 2] *= 1e30
    z[2, 3, 1] = 1000.0
    out = torch.full_like(z, math.nan)
    tb.trimul_block(z, mask, *reqs[0][2:], out=out, **cfg)
    assert calls == [(3,)]  # the pipelined kernel ran, on three programs
    for c in range(3):
        want = SPEC.reference(z[c], mask[c], *reqs[0][2:])
        assert rel_err(out[c], want) <= SPEC.tol("bf16"), (c, rel_err(out[c], want))
        assert not outside(out[c], want, "bf16").any(), (c, describe_mismatch(out[c], want, "bf16"))


@cpu_only
@pytest.mark.parametrize("shape", (dict(N=5, C=24, H=70), dict(N=3, C=128, H=128)))
def test_the_pipelined_last_kernel_gives_the_rules_bits(shape):
    args = SPEC.inputs(shape, seed=8, dtype="bf16", dist="heavy")
    rule = tb.trimul_block(*args, **dict(tb.TILES["bf16"][RULE], IN_R=16, FIN_R=16))
    for name in (n for n in OPIPE if not tb.TILES["bf16"][n]["FIN_ZGATE"]):  # the z-gate's g is not rounded to bf16
        assert torch.equal(tb.trimul_block(*args, **dict(tb.TILES["bf16"][name], IN_R=16, FIN_R=16)), rule), name
