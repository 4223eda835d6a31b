"""The input checks that specs share (each bad input a ``MageInputError`` naming the operation and the
argument), and small helpers for inputs: seeded values, the device and the bytes of an input set.
``mage.ops`` re-exports these names; specs import them from there."""
from __future__ import annotations

import torch

from .errors import MageInputError
from .precision import TORCH_DTYPE


def _short(dtype) -> str:
    return str(dtype).replace("torch.", "")  # 'bfloat16', as a user writes it


def tensor(op, name, t, dtypes, rank=None):
    if not isinstance(t, torch.Tensor):
        raise MageInputError(op, name, f"must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        want = " or ".join(_short(d) for d in dtypes)
        raise MageInputError(op, name, f"must have dtype {want}, got {_short(t.dtype)}")
    if rank is not None and t.dim() != rank:
        raise MageInputError(op, name, f"must have {rank} dimensions, got shape {tuple(t.shape)}")


def same_device(op, named):
    devices = {name: t.device for name, t in named.items()}
    first = next(iter(devices.values()))
    for name, dev in devices.items():
        if dev != first:
            raise MageInputError(op, name, f"is on {dev} but the other inputs are on {first}")


def same_dtype(op, named):
    """One storage precision for the op's floating inputs: every tensor of ``named`` in the first one's
    dtype (a bf16 x with an FP32 gamma would otherwise be read at the wrong element size)."""
    (first_name, first), *rest = named.items()
    for name, t in rest:
        if t.dtype != first.dtype:
            raise MageInputError(op, name, f"has dtype {_short(t.dtype)}, but {first_name} has {_short(first.dtype)}")


def contiguous(op, named):
    for name, t in named.items():
        if not t.is_contiguous():
            raise MageInputError(op, name, "must be contiguous (call .contiguous() first)")


def dim(op, name, t, axis, expected, what):
    if t.shape[axis] != expected:
        raise MageInputError(op, name, f"has size {t.shape[axis]} in dim {axis}, expected {expected} ({what})")


def check_out(op: str, out, shape, dtype, device, name: str = "out"):
    """Validate a caller-supplied output buffer (the checks pass one poisoned with NaN); ``name`` is the
    argument it came in as."""
    if out is None:
        return
    tensor(op, name, out, (dtype,))
    if tuple(out.shape) != tuple(shape):
        raise MageInputError(op, name, f"must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.device != device:
        raise MageInputError(op, name, f"is on {out.device}, expected {device}")
    if not out.is_contiguous():
        raise MageInputError(op, name, "must be contiguous")


def torch_dtype(op, dtype):
    if dtype not in TORCH_DTYPE:
        raise MageInputError(op, "dtype", f"must be one of {sorted(TORCH_DTYPE)}, got {dtype!r}")
    return TORCH_DTYPE[dtype]


def randn(shape, gen, device, dist, scale=1.0):
    """Normal values, or with dist='heavy' a log-normal scale on top: occasional values far from the bulk."""
    x = torch.randn(shape, generator=gen, device=device)
    if dist == "heavy":
        x = x * torch.exp(1.5 * torch.randn(shape, generator=gen, device=device))
    elif dist != "normal":
        raise MageInputError("inputs", "dist", f"must be 'normal' or 'heavy', got {dist!r}")
    return x * scale


def device_of(inputs):
    for t in inputs:
        dev = getattr(t, "device", None)
        if dev is not None:
            return dev
    raise ValueError("no tensor among inputs")


def input_bytes(inputs) -> int:
    """Bytes held by one input set (tensors, and inputs such as graphs that report ``nbytes``)."""
    total = 0
    for t in inputs:
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        else:
            total += int(getattr(t, "nbytes", 0))
    return total
