"""The custom MLP block's training path (triton_train.py): its output against the forward block's, its
gradients (x and every weight) against float64 autograd of the block's reference (awkward shapes, normal
and heavy-tailed inputs, memory poisoned), under bf16 autocast too, and a training step that moves the
weights."""
from __future__ import annotations

import pytest
import torch

from mage import ops
from mage.ext.training import passes
from tests.support.block_training import check_block, gpu_random, memory_bound_steps_in_bf16, path, steps_move_weights
from tests.support.kernel_checks import cpu_only, gpu

OP = "mlp_block"
SMALL = dict(T=5, d=37, hidden=19)


# ---- CPU, under the interpreter --------------------------------------------------------------------
@cpu_only
@pytest.mark.parametrize("shape", ops.OPS[OP].awkward, ids=ops.shape_key)
def test_grad_check_at_awkward_shapes(shape):
    im, fn = path(OP)
    r = passes.grad_check(im, fn, shape, seed=5, device="cpu")
    assert r.passed, r.reason


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("shape", [SMALL, dict(T=17, d=33, hidden=131), dict(T=1, d=1, hidden=1)], ids=ops.shape_key)
def test_output_and_gradients(shape, dist, poisoned):
    check_block(OP, shape, dist)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_autocast(dist):
    check_block(OP, dict(T=17, d=33, hidden=131), dist, amp=True)


@cpu_only
def test_bf16_autocast_keeps_the_memory_bound_steps_in_bf16():
    bf = torch.bfloat16
    memory_bound_steps_in_bf16(OP, SMALL, {(f"triton_{n}", bf) for n in (
        "layernorm_train", "layernorm_backward", "bias_gelu", "bias_gelu_backward")})


@cpu_only
def test_a_step_moves_the_weights():
    steps_move_weights(OP, SMALL)


@cpu_only
def test_no_tokens():
    check_block(OP, dict(T=0, d=8, hidden=12))


# ---- GPU -------------------------------------------------------------------------------------------
@gpu
def test_gpu_random_shapes():
    gpu_random(OP)
