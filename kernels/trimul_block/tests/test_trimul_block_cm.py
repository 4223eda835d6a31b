"""The triangle update's first kernel in the contraction's orientation (``_fused_cm``, config key ``IN_CM``): its
refusals, and a batch of complexes against float64 by both of its stores. Every IN_CM config of the table is also in
``test_trimul_block_fused.py``'s awkward-shape and GPU tests, and compiled for sm_90a in ``..._sm90.py``."""
from __future__ import annotations

import math

import pytest
import torch

from kernels.trimul_block import triton_block as tb
from mage import ops
from mage.check import describe_mismatch, outside
from tests.support.kernel_checks import assert_refuses, cpu_only, rel_err

NAME = "trimul_block"
SPEC = ops.OPS[NAME]
CM = [n for n in tb.TILES["bf16"].configs if tb.TILES["bf16"][n]["IN_CM"]]


@cpu_only
def test_the_channel_major_first_kernel_refuses_fp32_and_the_grid_kernels_keys():
    cfg = tb.TILES["bf16"][CM[0]]
    e = assert_refuses(tb.trimul_block, NAME, "config", *SPEC.inputs(dict(N=2, C=8, H=8), seed=1), **cfg)
    assert "IN_CM" in str(e) and "bf16" in str(e)
    bf = SPEC.inputs(dict(N=2, C=8, H=8), seed=1, dtype="bf16")
    for key, on in (("IN_RESIDENT", True), ("IN_JOIN", True), ("IN_TMA", True), ("IN_AB", True), ("FIN_ZGATE", True),
                    ("IN_FOLD", 128), ("IN_MAXNREG", 96), ("IN_LNFAST", True)):
        e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, **{key: on}))
        assert key in str(e)  # refused by IN_CM's check or an earlier one naming the key
    wide = SPEC.inputs(dict(N=2, C=256, H=8), seed=1, dtype="bf16")  # 256 KB of tiles: past a block's shared memory
    e = assert_refuses(tb.trimul_block, NAME, "config", *wide, **dict(cfg, IN_H=256, IN_GC=128))
    assert "IN_CM" in str(e) and "shared memory" in str(e)
    for over in (dict(IN_H=512), dict(IN_CM=2, IN_H=256)):  # past TMA's 256 rows a tile
        e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, **over))
        assert "IN_H" in str(e)
    e = assert_refuses(tb.trimul_block, NAME, "config", *bf, **dict(cfg, IN_CM=3))
    assert "IN_CM" in str(e)


@cpu_only
@pytest.mark.parametrize("tstore", (False, True))
@pytest.mark.parametrize("cm", (1, 2))
def test_a_batch_of_complexes_by_both_stores(cm, tstore, poisoned):
    # three complexes of 16 pairs, 32 a program (a program's tile clipped at its complex), H = 70: a second
    # chunk of 64 whose rows past H read b's weights (IN_CM=1) or zeros (2) and are never stored; rows near 1e30
    # and constant rows
    reqs = [SPEC.inputs(dict(N=4, C=24, H=70), seed=90 + c, dtype="bf16", dist="heavy" if c else "normal")
            for c in range(3)]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    z[1, 0, 2] *= 1e30
    z[0, 1, :2] = torch.tensor([1000.0, -7.0])[:, None]
    out = torch.full_like(z, math.nan)
    cfg = dict(tb.TILES["bf16"][CM[0]], IN_R=32, IN_TSTORE=tstore, IN_CM=cm)
    tb.trimul_block(z, mask, *reqs[0][2:], out=out, **cfg)
    for c in range(3):
        want = SPEC.reference(z[c], mask[c], *reqs[0][2:])
        assert rel_err(out[c], want) <= SPEC.tol("bf16"), (cm, tstore, c, rel_err(out[c], want))
        assert not outside(out[c], want, "bf16").any(), (cm, tstore, c, describe_mismatch(out[c], want, "bf16"))
