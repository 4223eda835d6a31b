"""The MLP block's bad inputs, shared by its tests of every column (test_mlp_block.py, the Python entry
points; test_mlp_block_rust.py, the Rust library's): each case names the argument it must be refused by."""
import torch

from mage import ops

SPEC = ops.OPS["mlp_block"]
SMALL = dict(T=5, d=37, hidden=19)


def good():
    return list(SPEC.inputs(SMALL, seed=6))


def bad_cases():
    """(argument named, inputs): mismatched weights, wrong channel counts, dtypes, ranks, a bad out."""
    x, gamma, beta, W1, b1, W2, b2 = good()
    cases = [
        ("gamma", [x, gamma[:-1], beta, W1, b1, W2, b2]),  # LayerNorm over the wrong channel count
        ("beta", [x, gamma, torch.ones(38), W1, b1, W2, b2]),
        ("W1", [x, gamma, beta, W1.t().contiguous(), b1, W2, b2]),  # W1 given [d, hidden]
        ("W1", [x, gamma, beta, W1[:, :-1], b1, W2, b2]),  # W1 built for another d
        ("b1", [x, gamma, beta, W1, b1[:-1], W2, b2]),
        ("W2", [x, gamma, beta, W1, b1, W2.t().contiguous(), b2]),  # W2 given [hidden, d]
        ("W2", [x, gamma, beta, W1, b1, W2[:, :-1], b2]),  # W2 from another hidden size
        ("b2", [x, gamma, beta, W1, b1, W2, torch.ones(5)]),
        ("W2", [x, gamma, beta, W1, b1, W2.double(), b2]),  # float64 is not a precision of the block
        ("b1", [x, gamma, beta, W1, b1.bfloat16(), W2, b2]),  # one stray precision
        ("x", [x[None], gamma, beta, W1, b1, W2, b2]),
        ("gamma", [x, gamma[None], beta, W1, b1, W2, b2]),
        ("b2", [x, gamma, beta, W1, b1, W2, b2.tolist()]),
        ("x", [x[:, :0], gamma[:0], beta[:0], W1[:, :0], b1, W2[:0], b2[:0]]),  # d = 0: nothing to normalise
        ("W1", [x, gamma, beta, W1.to("meta"), b1, W2, b2]),
    ]
    return cases
