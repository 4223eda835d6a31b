"""Argument checks of the Rust launch paths: the fast path for an ordinary call, and the full validation
with the op's own argument names when it fails.

Checking inputs costs microseconds of Python per call, which at the field-note shapes is as long as the
kernel: a cheap test that everything is ordinary (plain float32 tensors, contiguous, on one CUDA device,
shapes that fit) lets the common call skip the full validation. When it fails, the full validation runs
and raises its error naming the argument (or accepts an unusual but valid call), so errors are exactly
those of the slow path.
"""
from __future__ import annotations

import torch

from mage import ops
from mage.errors import MageInputError

_TENSOR, _F32T = torch.Tensor, torch.float32
INDEX_ARGS = ("rowptr", "col")  # int32 graph structure; every other tensor the kernels take is float32


def on_cuda(op: str, named: dict, storage: torch.dtype = torch.float32, fp32_args: tuple = ()) -> int:
    """The device index once every tensor is of the kernels' dtype, on a CUDA device and contiguous.
    ``storage``: the float tensors' dtype (bfloat16 for the model blocks' bf16 kernels), except the
    ``fp32_args``, which stay float32 (the graph's edge weights)."""
    for name, t in named.items():
        want = torch.int32 if name in INDEX_ARGS else torch.float32 if name in fp32_args else storage
        if t.dtype != want:
            # the ops accept bf16 (and int64 indices) too, but these kernels read float32 and int32: a
            # wider or narrower buffer would be read with the wrong element size
            raise MageInputError(op, name, f"must be {str(want).replace('torch.', '')} for the Rust kernels, "
                                           f"got {str(t.dtype).replace('torch.', '')}")
        if t.device.type != "cuda":
            raise MageInputError(op, name, f"must be on a CUDA device (the Rust kernels run on the GPU), got {t.device}")
        if not t.is_contiguous():
            raise MageInputError(op, name, "must be contiguous (call .contiguous() first)")
    first = next(iter(named.values()))
    return first.device.index if first.device.index is not None else torch.cuda.current_device()


def output(op: str, inputs, out):
    """The full validation of the op's inputs and ``out``; the output tensor."""
    spec = ops.OPS[op]
    spec.validate(*inputs)
    shape, dtype = spec.out_spec(*inputs)
    device = inputs[-1].device
    ops.check_out(op, out, shape, dtype, device)
    return out if out is not None else torch.empty(shape, dtype=dtype, device=device)


def plain(tensors, ranks) -> int:
    """The CUDA device index when every tensor is a contiguous float32 CUDA tensor of its rank on one
    device, else -1."""
    dev = -1
    for t, rank in zip(tensors, ranks):
        if type(t) is not _TENSOR or t.dtype is not _F32T or t.dim() != rank or not t.is_contiguous():
            return -1
        d = t.get_device()
        if d < 0 or (dev >= 0 and d != dev):
            return -1
        dev = d
    return dev


def fast(inputs, ranks, out, out_shape_of):
    """(output, device) for an ordinary call, else None (the caller then validates in full).
    ``out_shape_of(*inputs)`` is the output's shape, or None when the sizes do not fit together."""
    dev = plain(inputs, ranks)
    if dev < 0:
        return None
    shape = out_shape_of(*inputs)
    if shape is None:
        return None
    if out is None:
        x = inputs[0]
        return (torch.empty_like(x) if x.shape == shape else torch.empty(shape, dtype=_F32T, device=x.device)), dev
    if plain((out,), (len(shape),)) == dev and out.shape == shape:
        return out, dev
    return None


def dense_prologue(op: str, ranks: tuple, out_shape_of, inputs, out):
    """(output, device) of a call of an op whose inputs are all float32 tensors: the fast path for an
    ordinary call, else the full validation."""
    got = fast(inputs, ranks, out, out_shape_of)
    if got:
        return got
    y = output(op, inputs, out)
    return y, on_cuda(op, {**dict(zip(ops.OPS[op].args, inputs)), "out": y})
