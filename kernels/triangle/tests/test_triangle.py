"""The triangle contraction's definition: the float64 reference against loops, cost and reuse by hand,
bad input."""
import pytest
import torch

import mage
from mage import facets, ops
from mage.errors import MageInputError

SPEC = ops.get("triangle")


def test_reference_against_loops():
    A, B = SPEC.inputs(dict(N=3, C=2), seed=4)
    a, b = A.double().numpy(), B.double().numpy()
    got = SPEC.reference(A, B).numpy()
    for i in range(3):
        for j in range(3):
            for c in range(2):
                assert got[i, j, c] == pytest.approx(sum(a[i, k, c] * b[j, k, c] for k in range(3)), rel=1e-12)


def test_cost_and_reuse_by_hand():
    assert SPEC.cost(dict(N=5, C=3)) == (2 * 125 * 3, 4 * 3 * 25 * 3)
    assert facets.of("triangle").reuse(dict(BLOCK_I=64, BLOCK_J=64, BLOCK_K=16, BLOCK_C=8))["fmas_per_load"] == 32.0


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.randn(3, 4, 2), torch.randn(3, 4, 2)), r"triangle: argument 'A' has size 4 in dim 1"),
    (lambda: (torch.randn(3, 3, 2), torch.randn(3, 3, 5)), r"triangle: argument 'B' must have A's shape"),
])
def test_bad_input_names_the_argument(make, match):
    with pytest.raises(MageInputError, match=match):
        mage.run("triangle", "pytorch", *make())
