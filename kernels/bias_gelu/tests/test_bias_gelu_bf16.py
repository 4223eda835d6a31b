"""bias + GELU's bf16 column (bf16 storage, the sum and the GELU in FP32): eager PyTorch and the Triton
kernel (under the interpreter) against float64 on the bf16 values, the bytes it moves, and mixed
precisions refused."""
from __future__ import annotations

import pytest
import torch

from mage.ext.training.passes import grad_cost
from tests.support.kernel_checks import check_bf16_columns, check_mixed_precisions_refused, spec

OP = "bias_gelu"
# tiles that cover neither the rows nor the columns (the masked road), and an edge of a 1024 tile
SHAPES = [dict(R=5, C=1030), dict(R=17, C=33)]


def test_bf16_inputs_output_and_bytes():
    x, b = spec(OP).inputs(dict(R=3, C=5), dtype="bf16")
    assert x.dtype == b.dtype == spec(OP).empty_out(x, b).dtype == torch.bfloat16
    assert spec(OP).cost(dict(R=10, C=8), "bf16")[1] == 2 * (80 + 8 + 80)  # x, y, b: 2 bytes each
    assert grad_cost(spec(OP), dict(R=10, C=8), "bf16")[1] == 2 * (240 + 16)


@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_columns_against_float64(dist):
    check_bf16_columns(OP, SHAPES, dist)


def test_mixed_precisions_name_op_and_argument():
    x, b = spec(OP).inputs(dict(R=3, C=5), dtype="bf16")
    check_mixed_precisions_refused(OP, (x, b), stray=1)
