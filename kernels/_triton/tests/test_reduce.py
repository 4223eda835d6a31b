"""The deterministic column sum the backward passes share (kernels/_triton/reduce.py)."""
import pytest
import torch
import triton

from kernels._triton import reduce


@pytest.mark.parametrize("n,C", [(1, 1), (7, 33), (300, 512), (65, 1000)])
def test_column_sum_is_the_float64_sum_and_the_same_bits_twice(n, C):
    part = torch.randn(n, C) * torch.exp(2 * torch.randn(n, 1))  # rows of very different sizes
    out = torch.full((C,), float("nan"))
    got = reduce.column_sum(part, out)
    assert got is out
    want = part.double().sum(0)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5 * float(part.abs().sum(0).max()))
    again = reduce.column_sum(part, torch.full((C,), float("nan")))
    assert torch.equal(got, again)


@pytest.mark.parametrize("C", [128, 512, 1024, 4096, 8192])
def test_column_sum_spreads_narrow_buffers_over_more_programs(C):
    # The first version used 256 columns a program whatever C: 2 programs for the field shape's 512
    # columns walked every partial row alone (tens of microseconds on the H200 for a few MB).
    cfg = reduce.sum_config(C)
    programs = triton.cdiv(C, cfg["BLOCK_C"])
    assert programs >= min(C // reduce.MIN_BLOCK_C, reduce.WANT_PROGRAMS // 2)
    assert cfg["BLOCK_N"] * cfg["BLOCK_C"] == reduce.TILE
