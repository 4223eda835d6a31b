"""The fused road's Gluon first kernel on the CPU (Gluon has no interpreter): its compile for sm_90a (no spills,
within a block's shared memory, the consumers' raised register ceiling), the reference its GPU probe compares with
(``reference_first``: the rule's roundings) against the function in float64, and its refusals by name."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kernels._triton import sm90
from kernels.trimul_block import _gluon_first as K
from kernels.trimul_block import _gluon_first_check as KC
from mage.errors import MageInputError

C = H = 128


def _inputs(B, N, heavy=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn((B, N, N, C), generator=g)
    if heavy:
        z = z * torch.exp(2 * torch.randn((B, N, N, 1), generator=g))
        z.view(-1, C)[3] *= 1e25  # squares past FP32's range without the LayerNorm's scaling
    mask = (torch.rand((B, N, N), generator=g) > 0.25).float()
    return (z.bfloat16(), mask, 1 + 0.2 * torch.randn(C, generator=g), 0.2 * torch.randn(C, generator=g),
            torch.randn((C, 4 * H + C), generator=g) / C ** 0.5, 0.2 * torch.randn(4 * H + C, generator=g))


def _float64(z, mask, gamma, beta, w_in, b_in, eps=1e-5):
    x = z.double().reshape(-1, C)
    zn = torch.nn.functional.layer_norm(x, (C,), gamma.bfloat16().double(), beta.bfloat16().double(), eps)
    p = zn @ w_in.bfloat16().double() + b_in.bfloat16().double()
    m = mask.reshape(-1, 1).double()
    B, N = z.shape[0], z.shape[1]
    cm = lambda t: t.reshape(B, N * N, H).permute(0, 2, 1).reshape(B, H, N, N)  # noqa: E731
    return (cm(torch.sigmoid(p[:, :H]) * p[:, H:2 * H] * m), cm(torch.sigmoid(p[:, 2 * H:3 * H]) * p[:, 3 * H:4 * H] * m),
            torch.sigmoid(p[:, 4 * H:]))


@pytest.mark.parametrize("heavy", [False, True])
def test_the_reference_is_the_function_at_bf16_rounding(heavy):
    args = _inputs(2, 9, heavy)
    for got, want in zip(KC.reference_first(*args, 1e-5), _float64(*args)):
        err = (got.double() - want).abs()
        # zn and the outputs are rounded to bf16 (2^-8 relative each); the products sum 128 rounded terms
        assert float(err.max()) <= 0.05 * max(1.0, float(want.abs().max())), float(err.max())
        assert float(err.norm() / want.norm()) < 1e-2


def test_widths_dtypes_and_sizes_are_refused_by_name():
    z, mask, gamma, beta, w_in, b_in = _inputs(1, 8)
    out = lambda: (torch.empty((1, H, 8, 8), dtype=torch.bfloat16),) * 2 + (torch.empty((64, C), dtype=torch.bfloat16),)  # noqa: E731
    with pytest.raises(MageInputError, match="trimul_block.*'z'"):
        K.first_kernel(z.float(), mask, gamma, beta, w_in, b_in, *out(), 1e-5)
    with pytest.raises(MageInputError, match="trimul_block.*'w_in'"):
        K.first_kernel(z, mask, gamma, beta, w_in[:, :-8], b_in[:-8], *out(), 1e-5)
    with pytest.raises(MageInputError, match="trimul_block.*'z'"):  # N^2 = 49: a's rows not 16-byte aligned
        K.first_kernel(z[:, :7, :7], mask[:, :7, :7], gamma, beta, w_in, b_in, *out(), 1e-5)
    with pytest.raises(MageInputError, match="trimul_block.*'config'"):
        K.first_kernel(z, mask, gamma, beta, w_in, b_in, *out(), 1e-5, S=4, STB=2)
    # an odd count of z's stages: a consumer's first wait would pass on a stage its tile had not reached
    for stages in (1, 3):
        with pytest.raises(MageInputError, match="trimul_block.*'config'.*even"):
            K.first_kernel(z, mask, gamma, beta, w_in, b_in, *out(), 1e-5, S=stages, STB=1)
    with pytest.raises(MageInputError, match="trimul_block.*'z'"):  # not square: its rows are not B N N pairs
        K.first_kernel(z[:, :, :4], mask, gamma, beta, w_in, b_in, *out(), 1e-5)
    with pytest.raises(MageInputError, match="trimul_block.*'mask'"):
        K.first_kernel(z, mask[:, :4], gamma, beta, w_in, b_in, *out(), 1e-5)
    with pytest.raises(MageInputError, match="trimul_block.*'out'"):
        K.first_kernel(z, mask, gamma, beta, w_in, b_in, *out()[:2], torch.empty((64, C)), 1e-5)


@pytest.mark.slow
@pytest.mark.skipif(not sm90.available(), reason="Triton's wheel has no cuobjdump")
def test_the_kernel_compiles_for_sm90a_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json\nfrom kernels.trimul_block import _gluon_first_check as KC\n"
            "print(json.dumps([KC.compile_variant(), KC.compile_variant(PIPE=False)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=sm90._ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    for r in json.loads(out.stdout.splitlines()[-1]):
        assert r["stack"] == 0 and r["local"] == 0, r
        assert r["shared"] <= sm90.SHARED_LIMIT, r
        assert max(r["ceilings"]) >= 240 and min(r["ceilings"]) <= 24, r  # consumers hold zn and two slots' products
