"""LayerNorm's definition: the float64 reference against numpy, the cost model by hand, bad input."""
import numpy as np
import pytest
import torch

import mage
from mage import ops
from mage.errors import MageInputError

from ..spec import EPS

SPEC = ops.get("layernorm")


def test_reference_against_numpy():
    x, g, b = SPEC.inputs(dict(R=4, C=7), seed=2)
    xn = x.double().numpy()
    mu = xn.mean(1, keepdims=True)
    var = xn.var(1, keepdims=True)  # biased, as LayerNorm uses
    want = (xn - mu) / np.sqrt(var + EPS) * g.double().numpy() + b.double().numpy()
    np.testing.assert_allclose(SPEC.reference(x, g, b).numpy(), want, rtol=1e-12)


def test_bytes_by_hand():
    assert SPEC.bytes(dict(R=10, C=8)) == 4 * (80 + 16 + 80)


def test_inputs_are_seeded_and_fresh():
    a = SPEC.inputs(dict(R=3, C=5), seed=7)[0]
    assert torch.equal(a, SPEC.inputs(dict(R=3, C=5), seed=7)[0])
    assert not torch.equal(a, SPEC.inputs(dict(R=3, C=5), seed=8)[0])


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.randn(3, 4), torch.randn(4), torch.randn(3)), r"layernorm: argument 'beta' has size 3"),
    (lambda: (torch.randn(4), torch.randn(4), torch.randn(4)), r"layernorm: argument 'x' must have 2 dimensions"),
    (lambda: (torch.randn(3, 0), torch.randn(0), torch.randn(0)), r"layernorm: argument 'x' must have at least one column"),
])
def test_bad_input_names_the_argument(make, match):
    with pytest.raises(MageInputError, match=match):
        mage.run("layernorm", "pytorch", *make())
