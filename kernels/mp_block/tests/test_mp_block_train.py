"""The custom message-passing block's training path (triton_train.py): its output against the forward
block's, the gradients of h and every weight against float64 autograd of the block's reference (awkward
shapes: isolated nodes, one node, no nodes; normal and heavy-tailed features; memory poisoned), under
bf16 autocast too, and a training step that moves the weights."""
from __future__ import annotations

import pytest
import torch

from tests.support.kernel_checks import cpu_only, gpu
from tests.support.block_training import (
    check_block,
    gpu_random,
    memory_bound_steps_in_bf16,
    path,
    steps_move_weights,
)
from mage import ops
from mage.ext.training import passes

OP = "mp_block"
SMALL = dict(n=40, F=3, H=5, deg=2)


@cpu_only
@pytest.mark.parametrize("shape", ops.OPS[OP].awkward, ids=ops.shape_key)
def test_grad_check_at_awkward_shapes(shape):
    im, fn = path(OP)
    r = passes.grad_check(im, fn, shape, seed=5, device="cpu")
    assert r.passed, r.reason


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("shape", [SMALL, dict(n=37, F=33, H=17, deg=24), dict(n=9, F=7, H=2, deg=0)],
                         ids=ops.shape_key)
def test_output_and_gradients(shape, dist, poisoned):
    check_block(OP, shape, dist)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_autocast(dist):
    check_block(OP, dict(n=37, F=33, H=17, deg=24), dist, amp=True)


@cpu_only
def test_bf16_autocast_keeps_the_memory_bound_steps_in_bf16():
    memory_bound_steps_in_bf16(OP, SMALL, {(f"triton_{n}", torch.bfloat16) for n in (
        "layernorm_train", "layernorm_backward", "bias_gelu", "bias_gelu_backward")})


@cpu_only
def test_a_step_moves_the_weights():
    steps_move_weights(OP, SMALL)


@cpu_only
def test_no_nodes():
    check_block(OP, dict(n=0, F=8, H=8, deg=24))


@gpu
def test_gpu_random_shapes():
    gpu_random(OP)
