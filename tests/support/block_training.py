"""What the model blocks' training tests share (kernels/<block>/tests/test_<block>_train.py): the
registered training path, its output and gradients against float64 autograd of the block's reference, a
training step that moves the weights, and the bf16 dtypes its memory-bound steps run in."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mage import ops, registry
from mage.ext.training import passes, paths
from mage.ext.training.train import Step
from tests.support.kernel_checks import rel_err


def path(op: str):
    """(the FP32 Triton Impl, its registered training path)."""
    im = registry.get(op, "triton", "fp32")
    fn = paths.train_fn(im)
    assert fn is not None, f"{op}: no training path registered for the custom block"
    return im, fn


def check_block(op: str, shape: dict, dist: str = "normal", seed: int = 0, device: str = "cpu", amp: bool = False):
    """The training path's output and every floating input's gradient against float64 autograd of the
    reference, under ``torch.autocast`` (bf16) when ``amp``; without it, the output also against the
    forward block's own on the same inputs."""
    spec, (im, fn) = ops.OPS[op], path(op)
    raw = spec.inputs(shape, seed=seed, device=device, dist=dist)
    args = list(im.prepare(*raw) if im.prepare else raw)
    pos = passes.floating(raw)
    for i in pos:
        args[i] = args[i].detach().clone().requires_grad_(True)
    with torch.enable_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        y = fn(*args)
    dy = passes.grad_out_like(y, seed + 1)
    y.backward(dy)
    ref_args = [a.detach().double().requires_grad_(True) if i in pos else a for i, a in enumerate(raw)]
    with torch.enable_grad():
        ref = spec.reference(*ref_args)
        want = torch.autograd.grad(ref, [ref_args[i] for i in pos], dy.double(), allow_unused=True)
    prec = "bf16" if amp else "fp32"
    what = (op, shape, dist, prec)
    assert y.dtype == torch.float32 and y.shape == ref.shape, what  # FP32 out: the residual stream
    assert rel_err(y.detach(), ref.detach()) <= spec.tol(prec), what
    tol = spec.tol(prec) * passes.GRAD_TOL_FACTOR
    for i, w in zip(pos, want):
        g = args[i].grad
        if w is None:
            continue
        assert g is not None and g.dtype == torch.float32 and g.shape == w.shape, (what, spec.args[i])
        assert bool(torch.isfinite(g).all()), (what, spec.args[i], "non-finite")
        if w.numel():
            assert rel_err(g, w) <= tol, (what, spec.args[i], rel_err(g, w))
    if not amp:
        block = im.fn(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        assert rel_err(y.detach(), block.double()) <= spec.tol("fp32"), (what, "against the forward block")


def steps_move_weights(op: str, shape: dict) -> None:
    im, fn = path(op)
    assert paths.follows_autocast(im)  # its bf16 row computes the GEMMs in bf16 (see triton_train)
    for prec in ("fp32", "bf16"):
        assert Step(ops.OPS[op], im, fn, shape, prec, device="cpu").verify() == "", (op, prec)


class _MageDtypes(TorchDispatchMode):
    """Records each project operator's name and the dtype of its first argument as it runs."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "mage":
            self.seen.add((func.__name__.split(".")[0], args[0].dtype))
        return func(*args, **(kwargs or {}))


def memory_bound_steps_in_bf16(op: str, shape: dict, want: set) -> None:
    """Under a bf16 autocast the training path's LayerNorm and bias + GELU, forward and backward, see
    bf16 activations (``want``: the (operator, dtype) pairs the path must run), none of them FP32."""
    spec, (im, fn) = ops.OPS[op], path(op)
    raw = spec.inputs(shape, seed=3)
    args = list(im.prepare(*raw) if im.prepare else raw)
    for i in passes.floating(raw):
        args[i] = args[i].detach().clone().requires_grad_(True)
    with _MageDtypes() as mode:
        with torch.enable_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            y = fn(*args)
        y.backward(torch.ones_like(y))
    steps = {(name, dt) for name, dt in mode.seen if "layernorm" in name or "bias_gelu" in name}
    assert steps == want, (op, sorted(map(str, steps)))


def gpu_random(op: str, n: int = 10, seed: int = 16) -> None:
    """grad_check (FP32) and the bf16 autocast check at ``n`` random shapes, every other heavy-tailed."""
    im, fn = path(op)
    for i, shape in enumerate(ops.OPS[op].random_shapes(n, seed=seed)):
        r = passes.grad_check(im, fn, shape, seed=i, device="cuda")
        assert r.passed, (op, shape, r.reason)
        check_block(op, shape, "heavy" if i % 2 else "normal", seed=i, device="cuda")
        check_block(op, shape, "heavy" if i % 2 else "normal", seed=i, device="cuda", amp=True)
