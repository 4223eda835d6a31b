"""rope3's definition and kernel: the float64 reference by hand, the cost model by hand, its kind and
facets (a model's part), bad input named by argument, the Triton column's configs, strided inputs and bf16
storage under the interpreter, and the model's operator (``mage::vjepa2_rope3``) the swap calls."""
from __future__ import annotations

import math

import pytest
import torch

import mage
from mage import facets, ops, registry
from tests.support.kernel_checks import (assert_refuses, check_bf16_columns, check_every_sweep_config, cpu_only,
                                         module, rel_err, spec)

OP = "rope3"
SMALL = dict(B=1, H=2, F=3, G=3, D=38)  # 27 tokens: a partial block of 32; 12 channels an axis, 2 passed


def test_reference_by_hand():
    """D = 7: one pair an axis (S = 2, one frequency, 1), the last channel passed through; 3 x 3 frames."""
    x, grid = spec(OP).inputs(dict(B=1, H=1, F=2, G=3, D=7), seed=3)
    got = spec(OP).reference(x, grid)
    for n in range(18):
        pos = (n // 9, (n % 9) // 3, n % 3)
        for s in range(3):
            a, b = float(x[0, 0, n, 2 * s]), float(x[0, 0, n, 2 * s + 1])
            c, si = math.cos(pos[s]), math.sin(pos[s])
            assert float(got[0, 0, n, 2 * s]) == pytest.approx(a * c - b * si, rel=1e-12, abs=1e-12)
            assert float(got[0, 0, n, 2 * s + 1]) == pytest.approx(b * c + a * si, rel=1e-12, abs=1e-12)
        assert float(got[0, 0, n, 6]) == float(x[0, 0, n, 6])


def test_segment_width_and_costs_by_hand():
    from kernels.rope3.spec import seg_width
    assert [seg_width(d) for d in (6, 7, 8, 9, 63, 64, 128)] == [2, 2, 2, 2, 20, 20, 42]
    s = dict(B=2, H=3, F=4, G=5, D=64)  # 600 tokens of 64 channels, 60 of them rotated
    assert spec(OP).bytes(s) == 4 * 2 * 2 * 3 * 100 * 64
    assert spec(OP).cost(s, "bf16") == (6 * 2 * 3 * 100 * 60, 2 * 2 * 2 * 3 * 100 * 64)


def test_a_part_is_neither_an_operation_nor_a_block():
    assert spec(OP).kind == "part" and facets.of(OP).order > max(facets.of(n).order for n in ops.OPS if n != OP)
    assert facets.of(OP).work == "bytes" and facets.get(OP, "grad_flops", None) is None
    from mage.views import ops_in
    assert OP not in ops_in([OP, "matmul"]) and OP not in ops_in([OP, "mlp_block"], kind="block")


def test_inputs_are_the_models_layout():
    x, grid = spec(OP).inputs(dict(B=1, H=4, F=2, G=3, D=10), dtype="bf16")
    assert x.shape == (1, 4, 18, 10) and x.dtype == torch.bfloat16 and grid == 3
    assert x.stride() == (720, 10, 40, 1)  # [B, N, H, D] viewed as [B, H, N, D], as the attention makes it


@pytest.mark.parametrize("args,arg", [
    (lambda: (torch.randn(3, 4, 64), 4), "x"),
    (lambda: (torch.randn(1, 2, 3, 64, dtype=torch.float64), 4), "x"),
    (lambda: (torch.randn(1, 2, 3, 5), 4), "x"),  # under two channels an axis
    (lambda: (torch.randn(1, 2, 3, 64, device="meta"), 4), "x"),
    (lambda: (torch.randn(1, 2, 3, 64), 0), "grid"),
    (lambda: (torch.randn(1, 2, 3, 64), True), "grid"),
    (lambda: (torch.randn(1, 2, 3, 64), 4.0), "grid"),
])
@pytest.mark.parametrize("impl", ["pytorch", "triton"])
def test_bad_input_names_the_argument(args, arg, impl):
    assert_refuses(lambda *a: mage.run(OP, impl, *a), OP, arg, *args())
    if impl == "triton":  # the column checks on its own too (the harness calls it without mage.run)
        assert_refuses(registry.get(OP, "triton").fn, OP, arg, *args())


@cpu_only
def test_every_sweep_config():
    check_every_sweep_config(OP, SMALL)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_columns_against_float64(dist):
    check_bf16_columns(OP, [SMALL, dict(B=2, H=1, F=1, G=2, D=63)], dist)


@cpu_only
def test_strided_x_is_read_or_copied_right():
    x, grid = spec(OP).inputs(SMALL)
    want = spec(OP).reference(x, grid)
    fn = registry.get(OP, "triton").fn
    assert rel_err(fn(x.contiguous(), grid), want) < 1e-6  # contiguous
    wide = torch.zeros(*x.shape[:-1], 2 * x.shape[-1])
    wide[..., ::2] = x
    assert rel_err(fn(wide[..., ::2], grid), want) < 1e-6  # channels 2 apart: copied first


@cpu_only
def test_the_models_operator():
    """The operator the swapped attentions call: (x, grid, seg), the column's answer, opcheck, compiled."""
    module(OP)  # registers the operator (a test run alone imports nothing else first)
    x, grid = spec(OP).inputs(SMALL)
    want = registry.get(OP, "triton").fn(x, grid)
    assert torch.equal(torch.ops.mage.vjepa2_rope3(x, grid, 12), want)
    torch.library.opcheck(torch.ops.mage.vjepa2_rope3.default, (x.contiguous(), grid, 12))
    compiled = torch.compile(lambda t: torch.ops.mage.vjepa2_rope3(t, grid, 12) + 1.0, backend="aot_eager",
                             fullgraph=True)
    assert torch.equal(compiled(x), want + 1.0)


def test_the_operator_refuses_by_name():
    op = module(OP).rope3  # the operator's body: its argument checks, kept from the model's launcher
    assert_refuses(op, OP, "x", torch.randn(4, 64), 16, 20)
    assert_refuses(op, OP, "x", torch.randn(1, 2, 3, 64, dtype=torch.float64), 16, 20)
    assert_refuses(op, OP, "seg", torch.randn(1, 2, 3, 64), 16, 22)  # 3 x 22 > 64
    assert_refuses(op, OP, "seg", torch.randn(1, 2, 3, 64), 16, 7)
    assert_refuses(op, OP, "grid", torch.randn(1, 2, 3, 64), 0, 20)
    assert_refuses(op, OP, "out", torch.randn(1, 2, 3, 64), 4, 20, out=torch.empty(1, 2, 3, 63))
