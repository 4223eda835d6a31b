"""bias_gelu's Triton kernel: every tile config, strided input, bad input, the custom operator."""
from __future__ import annotations

import torch

from tests.support.kernel_checks import (assert_refuses, check_every_sweep_config, cpu_only, module, rel_err,
                                     spec)

OP = "bias_gelu"
SMALL = dict(R=37, C=129)


@cpu_only
def test_every_sweep_config():
    check_every_sweep_config(OP, SMALL)


@cpu_only
def test_strided_x_is_copied_not_misread():
    x, b = spec(OP).inputs(dict(R=6, C=10))
    xt = x.t().contiguous().t()  # columns 6 apart
    assert rel_err(module(OP).bias_gelu(xt, b), spec(OP).reference(x, b)) < 1e-6


def test_bad_inputs_name_op_and_argument():
    fn = module(OP).bias_gelu
    assert_refuses(fn, OP, "b", torch.ones(3, 4), torch.ones(5))
    assert_refuses(fn, OP, "x", torch.ones(3, 4, dtype=torch.int32), torch.ones(4))
    assert_refuses(fn, OP, "out", torch.ones(3, 4), torch.ones(4), out=torch.empty(1, 4))


@cpu_only
def test_custom_op_runs_eagerly():
    x, b = spec(OP).inputs(dict(R=3, C=10))
    assert torch.allclose(torch.ops.mage.triton_bias_gelu(x, b), torch.nn.functional.gelu(x + b), atol=1e-6)


@cpu_only
def test_even_tiles_take_the_unmasked_road():
    """Shapes the tiles cover exactly compile without masks (EVEN); with and without the cache hints
    they give the reference's answer on heavy-tailed inputs (the masked road is the SMALL shape above)."""
    from tests.support.kernel_checks import check_forced
    for cfg in (dict(BLOCK_R=2, BLOCK_C=64, num_warps=4, EVICT=1), dict(BLOCK_R=1, BLOCK_C=32, num_warps=2, EVICT=0)):
        check_forced(OP, cfg, dict(R=6, C=128))
