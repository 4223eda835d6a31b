"""The custom triangle update's training path (triton_train.py): its output against the forward block's,
the gradients of z, the mask and every weight against float64 autograd of the block's reference (awkward
shapes, normal and heavy-tailed inputs, memory poisoned), a batch of complexes, under bf16 autocast too,
and a training step that moves the weights."""
from __future__ import annotations

import pytest
import torch

from tests.support.kernel_checks import cpu_only, gpu, rel_err
from tests.support.block_training import (
    check_block,
    gpu_random,
    memory_bound_steps_in_bf16,
    path,
    steps_move_weights,
)
from mage import ops
from mage.ext.training import passes

OP = "trimul_block"
SMALL = dict(N=5, C=7, H=3)


@cpu_only
@pytest.mark.parametrize("shape", ops.OPS[OP].awkward, ids=ops.shape_key)
def test_grad_check_at_awkward_shapes(shape):
    im, fn = path(OP)
    r = passes.grad_check(im, fn, shape, seed=5, device="cpu")
    assert r.passed, r.reason


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("shape", [SMALL, dict(N=9, C=20, H=11), dict(N=1, C=1, H=1)], ids=ops.shape_key)
def test_output_and_gradients(shape, dist, poisoned):
    check_block(OP, shape, dist)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_autocast(dist):
    check_block(OP, dict(N=9, C=20, H=11), dist, amp=True)


@cpu_only
def test_a_batch_of_complexes():
    """[B, N, N, C]: each complex's gradients as if it were trained alone (the batch's own shapes)."""
    spec, (_, fn) = ops.OPS[OP], path(OP)
    one = [spec.inputs(SMALL, seed=s) for s in (1, 2)]
    z = torch.stack([one[0][0], one[1][0]]).requires_grad_(True)
    mask = torch.stack([one[0][1], one[1][1]])
    w = [t.clone().requires_grad_(True) for t in one[0][2:]]
    y = fn(z, mask, *w)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(3))
    y.backward(dy)
    zd = z.detach().double().requires_grad_(True)
    wd = [t.detach().double().requires_grad_(True) for t in w]
    ref = spec.reference(zd, mask, *wd)
    want = torch.autograd.grad(ref, [zd] + wd, dy.double())
    assert rel_err(y.detach(), ref.detach()) <= spec.tol("fp32")
    for g, r in zip([z.grad] + [t.grad for t in w], want):
        assert rel_err(g, r) <= spec.tol("fp32") * passes.GRAD_TOL_FACTOR


@cpu_only
def test_bf16_autocast_keeps_the_memory_bound_steps_in_bf16():
    memory_bound_steps_in_bf16(OP, SMALL, {(f"triton_{n}", torch.bfloat16) for n in (
        "layernorm_train", "layernorm_backward")})


@cpu_only
def test_a_step_moves_the_weights():
    steps_move_weights(OP, SMALL)


@cpu_only
def test_no_pairs():
    check_block(OP, dict(N=0, C=4, H=4))


@gpu
def test_gpu_random_shapes():
    gpu_random(OP)
