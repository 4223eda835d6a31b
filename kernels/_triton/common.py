"""What the Triton launchers share: splitting a config into kernel constants and launch options, and
the checks and offsets every launcher needs. (A launcher's tiles, their choice and its plan memo:
``tile_table``.)
"""
from __future__ import annotations

import os
import weakref

import triton

from mage.errors import MageInputError

# Keys of a config dict that are launch options, not constants of the kernel.
LAUNCH_KEYS = ("num_warps", "num_stages")


def split(config: dict) -> tuple[dict, dict]:
    """(kernel constants, launch options) of one config dict."""
    consts = {k: v for k, v in config.items() if k not in LAUNCH_KEYS}
    launch = {k: v for k, v in config.items() if k in LAUNCH_KEYS}
    return consts, launch


def interpreting() -> bool:
    """Whether kernels run in Triton's CPU interpreter (which runs programs one after another and has
    no inline assembly)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host ints (``triton.cdiv`` is a jit function: calling it from Python costs a few us)."""
    return -(-a // b)


def reach(shape, strides) -> int:
    """The element offset of the last element from the first (``max_offset`` from sizes and strides)."""
    if 0 in tuple(shape):
        return 0
    return sum((s - 1) * abs(st) for s, st in zip(shape, strides))


def on_device(op: str, named: dict) -> None:
    """Refuse, before any launch, a tensor the kernel cannot read: a compiled kernel reads only CUDA
    memory, the interpreter only host memory it can address (CPU, or CUDA it copies); a 'meta' tensor
    has no memory at all. Without this Triton's own error names neither the operation nor the argument."""
    if all(t.is_cuda for t in named.values()):  # the launch path: no more than this on every call
        return
    interp = interpreting()
    for name, t in named.items():
        kind = t.device.type
        if kind == "cuda" or (interp and kind == "cpu"):
            continue
        where = "CUDA or, under TRITON_INTERPRET=1, CPU" if interp else "CUDA (or CPU under TRITON_INTERPRET=1)"
        raise MageInputError(op, name, f"is on {t.device}; the Triton kernel reads {where} tensors")


INT32_LIMIT = 2**31


def max_offset(t) -> int:
    """The element offset of ``t``'s last element from its first (shape and strides only, so it works
    on 'meta' tensors and never touches memory); 0 for an empty tensor, which is never read."""
    if t.numel() == 0:
        return 0
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()) if s > 0)


def offsets_64(*tensors) -> bool:
    """Whether a kernel's index arithmetic must be 64-bit: an element offset a tensor reaches (row index
    times row stride, say) does not fit in int32. Offsets are computed from int32 program ids and
    sizes; Triton keeps their products in int32, which wraps past 2**31 - 1 and would read the wrong
    memory. Tensors below the limit keep the 32-bit instructions (the measured kernels are unchanged)."""
    # a contiguous tensor of fewer than 2**31 elements is the common case, decided without the sum
    return any((t.numel() >= INT32_LIMIT or not t.is_contiguous()) and max_offset(t) >= INT32_LIMIT
               for t in tensors)


class TensorMemo:
    """Results found again by the identity and version counter of tensors (plus any hashable
    ``extra``): an in-place write through PyTorch moves the version and misses. Weak references: a
    memo keeps no tensor alive, and a new tensor that reuses a dead one's id does not match it."""

    def __init__(self, size: int = 64):
        self.size, self.items = size, {}

    @staticmethod
    def _key(tensors, extra):
        return tuple((id(t), t._version) for t in tensors) + (extra,)

    def get(self, tensors, extra=None):
        hit = self.items.get(self._key(tensors, extra))
        if hit is not None and all(r() is t for r, t in zip(hit[0], tensors)):
            return hit[1]
        return None

    def put(self, tensors, extra, value):
        if len(self.items) >= self.size:
            self.items.pop(next(iter(self.items)))
        self.items[self._key(tensors, extra)] = (tuple(weakref.ref(t) for t in tensors), value)
        return value


# The lean launch (kernels/_triton/launch.py): every launcher launches its kernel through it.
from .launch import launch  # noqa: E402,F401 - after the helpers above, which it does not need
