"""layernorm's Triton kernel: every tile config, the chunked path, accuracy where a naive formula
cancels (large mean) or overflows (large magnitude), bad input, the custom operator."""
from __future__ import annotations

import pytest
import torch

from tests.support.kernel_checks import (assert_refuses, check_every_sweep_config, check_forced, cpu_only, module,
                                     rel_err, spec)

OP = "layernorm"
# Every sweep config sees one masked chunk (no config caps a chunk below 512) and, where BLOCK_R > 1, a
# partial block of rows: the roads C = 1000 reached, at half the interpreter's block width.
SMALL = dict(R=9, C=300)
ONE_BLOCK, CHUNKED = dict(MAX_BLOCK_C=4096), dict(MAX_BLOCK_C=512)


@cpu_only
def test_every_sweep_config():
    check_every_sweep_config(OP, SMALL)


@cpu_only
@pytest.mark.parametrize("config, shape", [
    (dict(MAX_BLOCK_C=16, BLOCK_R=2), dict(R=5, C=37)),  # chunked path, Chan merges
    # many chunks (33 a row): 10 s under the interpreter, so the full tier; the road is the one above
    pytest.param(dict(MAX_BLOCK_C=256, BLOCK_R=1), dict(R=3, C=8193), marks=pytest.mark.slow),
])
def test_forced_chunked_paths(config, shape):
    check_forced(OP, config, shape)


def _rows(scales, C=3000, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(scales), C, generator=g) * torch.tensor(scales)[:, None]
    return x, 1.0 + 0.1 * torch.randn(C, generator=g), 0.1 * torch.randn(C, generator=g)


@cpu_only
def test_large_offset():
    # |mean| >> std is where a one-pass sum of squares would cancel; both paths must stay accurate
    x, g, b = _rows([1.0] * 4)
    x += 1e3  # the sum of x^2 would lose ~6%
    ref = spec(OP).reference(x, g, b)
    for cfg in (ONE_BLOCK, CHUNKED):
        assert rel_err(module(OP).layernorm(x, g, b, **cfg), ref) < 1e-3, cfg


@cpu_only
@pytest.mark.parametrize("cfg", [ONE_BLOCK, CHUNKED], ids=["one_block", "chunked"])
def test_large_magnitude_rows_do_not_overflow(cfg):
    # Squared deviations past ~1.8e19 overflow fp32: the variance becomes inf and y = beta (eager
    # PyTorch does this). Rows at 1e20, 1e30 and near fp32's maximum must match float64 row by row;
    # a row with one huge chunk after small ones exercises the chunked path's rescaling.
    x, g, b = _rows([1.0, 1e20, 1e30, 1e38 / 6, 1e-30, 0.0])
    x = torch.cat([x, x[:1].clone()])
    x[-1, 2000:] *= 1e25
    ref = spec(OP).reference(x, g, b)
    y = module(OP).layernorm(x, g, b, **cfg)
    errs = [rel_err(y[i], ref[i]) for i in range(x.shape[0])]
    assert max(errs) < 1e-5, errs


@cpu_only
@pytest.mark.parametrize("cfg", [ONE_BLOCK, CHUNKED], ids=["one_block", "chunked"])
def test_constant_rows_past_the_scaling_threshold(cfg):
    # A constant row is beta, and its 1 / sqrt(var + eps) is 1 / sqrt(eps). Scaled (a row whose sums overflow),
    # eps s^2 underflowed to 0 beside a variance of 0: 1/0 made the row NaN and its stored rstd inf (found by a
    # review of the triangle update's folded LayerNorm, which scales as this kernel does)
    x = torch.tensor([3e37, -1e37, 1e21, 5.0, 0.0])[:, None].repeat(1, 300)
    g, b = 1.0 + 0.1 * torch.randn(300, generator=torch.Generator().manual_seed(2)), torch.linspace(-1, 1, 300)
    mean, rstd = torch.empty(5), torch.empty(5)
    y = module(OP).layernorm(x, g, b, stats=(mean, rstd), **cfg)
    assert torch.equal(y, b.expand_as(y)), y[:, :3]
    assert torch.allclose(rstd, torch.full((5,), 1e-5 ** -0.5)), rstd
    assert torch.equal(mean, x[:, 0])


@cpu_only
def test_ordinary_and_scaled_rows_agree_with_float64():
    # The scale is a power of two, applied only to rows with max |x| >= 2 (exact: it changes no bit
    # of a product or sum that does not underflow); rows below are computed as before.
    x, g, b = _rows([0.3, 1.0, 2.0**40], C=500)
    for cfg in (ONE_BLOCK, dict(MAX_BLOCK_C=128)):
        y = module(OP).layernorm(x, g, b, **cfg)
        assert rel_err(y, spec(OP).reference(x, g, b)) < 1e-6, cfg


def test_bad_inputs_name_op_and_argument():
    fn = module(OP).layernorm
    assert_refuses(fn, OP, "beta", torch.ones(3, 4), torch.ones(4), torch.ones(5))
    assert_refuses(fn, OP, "gamma", torch.ones(3, 4), torch.ones(3), torch.ones(4))
    assert_refuses(fn, OP, "out", torch.ones(3, 4), torch.ones(4), torch.ones(4), out=torch.empty(4, 3))


@cpu_only
def test_custom_op_runs_eagerly():
    x, g, b = spec(OP).inputs(dict(R=3, C=10))
    assert rel_err(torch.ops.mage.triton_layernorm(x, g, b), spec(OP).reference(x, g, b)) < 1e-6


@cpu_only
@pytest.mark.parametrize("cfg", [ONE_BLOCK, dict(MAX_BLOCK_C=256)], ids=["one_block", "chunked"])
def test_rows_of_equal_values_give_beta(cfg):
    # variance 0: y = beta exactly in float64; a mean off by one rounding turned that rounding into
    # gamma * error / sqrt(eps), relative errors of 1e-4 (x = 1) to 1e-1 (x = 1000)
    C = 1000
    x = torch.tensor([1.0, 1000.0, -3.7, 1e25, 0.1])[:, None].expand(5, C)
    g = torch.Generator().manual_seed(2)
    gamma, beta = 1.0 + 0.1 * torch.randn(C, generator=g), 0.1 * torch.randn(C, generator=g)
    y = module(OP).layernorm(x, gamma, beta, **cfg)
    ref = spec(OP).reference(x, gamma, beta)
    errs = [rel_err(y[i], ref[i]) for i in range(5)]
    assert max(errs) < 1e-6, errs


@pytest.mark.parametrize("R, C, block_r, max_c, even", [
    (6, 64, 2, 64, True),  # one chunk of exactly C, whole blocks of rows: no masks
    (5, 64, 2, 64, False),  # a tail of rows: the last program's second row lies past R
    (3, 64, 4, 64, False),  # fewer rows than one block
    (6, 72, 2, 64, False),  # a tail of columns
    (4, 48, 1, 64, False),  # a chunk wider than the row
])
def test_the_unmasked_road_only_where_nothing_is_past_the_end(R, C, block_r, max_c, even):
    """The road is chosen from the sizes alone (no kernel runs): an unmasked load past the last row or
    column reads out of bounds on a GPU, and under the interpreter it exhausted memory. A mutant that
    dropped the row condition survived every kernel test."""
    _, kw = module(OP).TILES.plan(module(OP)._plan, (R, C), dict(BLOCK_R=block_r, MAX_BLOCK_C=max_c))
    assert kw["EVEN"] is even, kw


@cpu_only
def test_even_rows_take_the_unmasked_road():
    """A row of exactly one chunk and R a multiple of BLOCK_R compiles without masks (EVEN); with the
    cache hints on, one-chunk and chunked rows still give the reference's answer on heavy-tailed inputs."""
    from tests.support.kernel_checks import check_forced
    for cfg, shape in ((dict(BLOCK_R=2, MAX_BLOCK_C=64, num_warps=4, EVICT=1), dict(R=6, C=64)),
                       (dict(BLOCK_R=1, MAX_BLOCK_C=64, num_warps=4, EVICT=0), dict(R=3, C=64)),
                       (dict(BLOCK_R=2, MAX_BLOCK_C=16, num_warps=4, EVICT=1), dict(R=5, C=72))):
        check_forced(OP, cfg, shape)


@cpu_only
@pytest.mark.parametrize("config", (ONE_BLOCK, dict(MAX_BLOCK_C=16, BLOCK_R=2)))
def test_a_transposed_x_is_read_in_place_with_the_contiguous_answer(config, poisoned, monkeypatch):
    # x [R, C] as a view of a [C, R] buffer (a channel-major one: the triangle update's o): its columns are read
    # R apart rather than copied first, and each row's sums run in the same order, so the output is the same bits
    layernorm = module(OP).layernorm
    buf = torch.randn(37, 21, generator=torch.Generator().manual_seed(4)) * 3 + 1  # C = 37 channels, R = 21 rows
    gamma, beta = torch.randn(37), torch.randn(37)
    want = layernorm(buf.t().contiguous(), gamma, beta, **config)
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda *a, **k: pytest.fail("x was copied"))
    got = layernorm(buf.t(), gamma, beta, **config)
    assert torch.equal(got, want) and got.is_contiguous()
