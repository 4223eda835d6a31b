"""bias + GELU's definition: the float64 reference against math.erf, the cost model by hand, bad input."""
import math

import pytest
import torch

import mage
from mage import ops
from mage.errors import MageInputError

SPEC = ops.get("bias_gelu")


def test_reference_against_math_erf():
    x, b = SPEC.inputs(dict(R=2, C=3), seed=1)
    got = SPEC.reference(x, b).numpy()
    for r in range(2):
        for c in range(3):
            z = float(x[r, c]) + float(b[c])
            assert got[r, c] == pytest.approx(0.5 * z * (1 + math.erf(z / math.sqrt(2))), rel=1e-12)


def test_bytes_by_hand():
    assert SPEC.bytes(dict(R=10, C=8)) == 4 * (80 + 8 + 80)


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.randn(3, 4), torch.randn(5)), r"bias_gelu: argument 'b' has size 5"),
    (lambda: (torch.randn(3, 4).half(), torch.randn(4)), r"bias_gelu: argument 'x' must have dtype float32"),
])
def test_bad_input_names_the_argument(make, match):
    with pytest.raises(MageInputError, match=match):
        mage.run("bias_gelu", "pytorch", *make())


def test_out_buffer_is_validated():
    x, b = torch.randn(3, 4), torch.randn(4)
    with pytest.raises(MageInputError, match=r"bias_gelu: argument 'out' must have shape \(3, 4\)"):
        mage.run("bias_gelu", "pytorch", x, b, out=torch.empty(4, 3))
    # a buffer that broadcasts, or has another dtype, is refused too (mage.run passed them before)
    with pytest.raises(MageInputError, match=r"bias_gelu: argument 'out' must have shape"):
        mage.run("bias_gelu", "pytorch", x, b, out=torch.empty(2, 3, 4))
    with pytest.raises(MageInputError, match=r"bias_gelu: argument 'out' must have dtype float32"):
        mage.run("bias_gelu", "pytorch", x, b, out=torch.empty(3, 4, dtype=torch.float64))
