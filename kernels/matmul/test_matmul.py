"""matmul's definition: the float64 reference against loops, the cost model by hand, bad input."""
import numpy as np
import pytest
import torch

import mage
from mage import ops
from mage.errors import MageInputError

SPEC = ops.get("matmul")


def test_reference_against_loops():
    A, B = SPEC.inputs(dict(M=3, K=4, N=2), seed=3)
    a, b = A.double().numpy(), B.double().numpy()
    want = [[sum(a[i, k] * b[k, j] for k in range(4)) for j in range(2)] for i in range(3)]
    np.testing.assert_allclose(SPEC.reference(A, B).numpy(), want, rtol=1e-12)


def test_cost_by_hand():
    assert SPEC.cost(dict(M=2, K=3, N=4)) == (2 * 2 * 3 * 4, 4 * (6 + 12 + 8))
    assert SPEC.cost(dict(M=2, K=3, N=4), "bf16")[1] == 2 * (6 + 12 + 8)


def test_reuse_by_hand():
    # a 16 x 16 tile, 16 deep: 512 distinct values serve 4096 multiply-adds
    assert SPEC.reuse(dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)) == dict(loads=512, fmas=4096, fmas_per_load=8.0)


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.randn(3, 4).double(), torch.randn(4, 2)), r"matmul: argument 'A' must have dtype"),
    (lambda: (torch.randn(3, 4), torch.randn(5, 2)), r"matmul: argument 'B' has size 5 in dim 0"),
    (lambda: (torch.randn(3, 4, 1), torch.randn(4, 2)), r"matmul: argument 'A' must have 2 dimensions"),
    (lambda: (torch.randn(3, 4), "B"), r"matmul: argument 'B' must be a torch.Tensor"),
])
def test_bad_input_names_the_argument(make, match):
    with pytest.raises(MageInputError, match=match):
        mage.run("matmul", "pytorch", *make())
