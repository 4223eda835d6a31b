"""LayerNorm's bf16 column (bf16 storage, FP32 statistics): eager PyTorch and the Triton kernel (under
the interpreter) against float64 on the bf16 values, the bytes it moves, and mixed precisions refused."""
from __future__ import annotations

import pytest
import torch

from mage.ext.training.passes import grad_cost
from tests.support.kernel_checks import check_bf16_columns, check_mixed_precisions_refused, spec

OP = "layernorm"
# a row of more than one chunk (C > the sweep default's 1024: read twice), a masked one-chunk row
SHAPES = [dict(R=2, C=1100), dict(R=3, C=129)]


def test_bf16_inputs_output_and_bytes():
    x, g, b = spec(OP).inputs(dict(R=3, C=5), dtype="bf16")
    assert x.dtype == g.dtype == b.dtype == torch.bfloat16
    assert spec(OP).empty_out(x, g, b).dtype == torch.bfloat16
    assert spec(OP).cost(dict(R=10, C=8), "bf16")[1] == 2 * (80 + 16 + 80)  # x, y, gamma, beta: 2 bytes each
    assert grad_cost(spec(OP), dict(R=10, C=8), "bf16")[1] == 2 * (240 + 24) + 4 * 20  # statistics stay FP32


@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_columns_against_float64(dist):
    check_bf16_columns(OP, SHAPES, dist, (dict(MAX_BLOCK_C=16, BLOCK_R=2), dict(R=5, C=37)))  # the chunked road


@pytest.mark.parametrize("which", ["gamma", "beta"])
def test_mixed_precisions_name_op_and_argument(which):
    x, g, b = spec(OP).inputs(dict(R=3, C=5), dtype="bf16")
    check_mixed_precisions_refused(OP, (x, g, b), stray=1 if which == "gamma" else 2)  # one FP32 stray
