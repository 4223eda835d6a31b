"""The triangle update's first kernel with the LayerNorm folded into its GEMM (``_fused_fold``, config key
``IN_FOLD``): its refusals, and its answers against float64 where the fold cancels or overflows. Every fold
config of the table is also in ``test_trimul_block_fused.py``'s awkward-shape and GPU tests."""
from __future__ import annotations

import math

import torch

from kernels.trimul_block import triton_block as tb
from mage import ops
from mage.check import describe_mismatch, outside
from tests.support.kernel_checks import assert_refuses, cpu_only, rel_err

NAME = "trimul_block"
SPEC = ops.OPS[NAME]


@cpu_only
def test_the_folded_first_kernel_refuses_fp32_and_the_grid_kernels_keys(poisoned):
    """IN_FOLD rounds gamma w_in to bf16: refused at FP32, as are its bad widths, tiles past TMA's box or the
    shared memory, and the grid kernel's keys; at bf16 it computes as the reference does, in both forms (a column
    tile a program, all of them in turn), a batch of complexes each against its own reference, with rows near
    1e30 (their squares overflow FP32), constant rows (a review found a constant row of 1000 off by 0.37: the
    fold's cancellation times 1/sqrt(eps)), one at 3e37 (NaN before: eps's share underflowed) and rows
    1000 off zero with a small spread."""
    name = next(n for n in tb.TILES["bf16"].configs if tb.TILES["bf16"][n]["IN_FOLD"])
    fp32 = SPEC.inputs(dict(N=2, C=8, H=8), seed=1)
    e = assert_refuses(tb.trimul_block, NAME, "config", *fp32, **tb.TILES["bf16"][name])
    assert "IN_FOLD" in str(e) and "bf16" in str(e)
    bf = SPEC.inputs(dict(N=2, C=8, H=8), seed=1, dtype="bf16")
    for over, key in ((dict(IN_FOLD=64), "IN_FOLD"), (dict(IN_FOLD=512), "IN_FOLD"), (dict(IN_FOLD=0, IN_FOLD_LOOP=2), "IN_FOLD_LOOP"),
                      (dict(IN_FOLD_LOOP=4), "IN_FOLD_LOOP"), (dict(IN_RESIDENT=True), "IN_RESIDENT"),
                      (dict(IN_JOIN=True, IN_TMA=True), "IN_TMA"), (dict(FIN_ZGATE=True), "FIN_ZGATE"),
                      (dict(IN_JOIN=True), "IN_JOIN"), (dict(IN_GC=64), "IN_GC"), (dict(IN_R=512), "IN_R")):
        e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(tb.TILES["bf16"][name], **over))
        assert key in str(e)
    wide = SPEC.inputs(dict(N=2, C=200, H=8), seed=1, dtype="bf16")  # 320 KB of tiles at 256 channels padded
    e = assert_refuses(tb.trimul_block, NAME, "config", *wide,
                       **dict(tb.TILES["bf16"][name], IN_R=256, IN_FOLD_LOOP=3))
    assert "shared memory" in str(e)
    reqs = [SPEC.inputs(dict(N=5, C=24, H=20), seed=70 + c, dtype="bf16", dist="heavy" if c else "normal") for c in range(3)]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    z[1, 0, 2] *= 1e30
    z[2, 3, 1] *= 1e25
    z[0, 1, :3] = torch.tensor([1000.0, -7.0, 0.0])[:, None]  # constant rows
    z[1, 2, 4] = 3e37
    z[2, 4] = 1000 + 0.05 * z[2, 4]  # far from zero for their spread
    for loop in (0, 2):
        out = torch.full_like(z, math.nan)
        tb.trimul_block(z, mask, *reqs[0][2:], out=out, **dict(tb.TILES["bf16"][name], IN_R=16, IN_FOLD_LOOP=loop))
        for c in range(3):
            want = SPEC.reference(z[c], mask[c], *reqs[0][2:])
            assert rel_err(out[c], want) <= SPEC.tol("bf16"), (loop, c, rel_err(out[c], want))
            assert not outside(out[c], want, "bf16").any(), (loop, c, describe_mismatch(out[c], want, "bf16"))
    # at the models' 128 channels the fold's cancellation on a constant row of 1000 cost 7% of the output's norm
    z, mask, *w = SPEC.inputs(dict(N=3, C=128, H=16), seed=9, dtype="bf16")
    z[0, :2] = torch.tensor([1000.0, -300.0], dtype=z.dtype)[:, None]
    z[2, 1] = 1000 + 0.05 * z[2, 1]
    want = SPEC.reference(z, mask, *w)
    for loop in (0, 2):
        got = tb.trimul_block(z, mask, *w, **dict(tb.TILES["bf16"][name], IN_R=16, IN_FOLD_LOOP=loop))
        assert rel_err(got, want) <= SPEC.tol("bf16") and not outside(got, want, "bf16").any(), (loop, rel_err(got, want))
