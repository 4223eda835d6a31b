"""Which implementations exist: (operation, implementation, dtype) -> a callable and what it can run on.

Tests, the harness and the pages loop over this registry; adding a kernel is one ``register`` call.
Kernel modules register themselves when imported; ``load()`` imports all of them.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from .errors import MageInputError
from .ops import OPS

# Modules that register implementations, in the order their columns appear in figures.
KERNEL_MODULES = ("kernels.pytorch_ops", "kernels.triton_ops", "kernels.rust")


@dataclass(frozen=True)
class Impl:
    op: str
    name: str  # e.g. 'pytorch', 'torch_compile', 'triton', 'rust', 'rust_scalar'
    fn: Callable  # fn(*inputs, out=None) -> output tensor
    dtype: str = "fp32"
    family: str = ""  # 'pytorch', 'triton' or 'rust': the column group in figures
    needs_cuda: bool = True  # False: also runs on CPU tensors
    interpret: bool = False  # runs on CPU under TRITON_INTERPRET=1
    # prepare(*inputs) -> inputs, done once per input set and never timed (building a sparse matrix,
    # compiling). Returns the inputs to pass to fn.
    prepare: Optional[Callable] = None
    # available() -> None when usable, else the reason (library not built, no CUDA, ...)
    available: Callable[[], Optional[str]] = field(default=lambda: None)
    config: dict = field(default_factory=dict)  # tile sizes and the like, recorded with measurements
    note: str = ""

    @property
    def key(self):
        return (self.op, self.name, self.dtype)

    def runs_on(self, device: str) -> Optional[str]:
        """None if this implementation can run on ``device`` ('cpu' or 'cuda') now, else why not."""
        reason = self.available()
        if reason:
            return reason
        if device == "cpu" and self.needs_cuda:
            if self.interpret and os.environ.get("TRITON_INTERPRET") == "1":
                return None
            return "needs CUDA" + (" (or TRITON_INTERPRET=1)" if self.interpret else "")
        return None


_REGISTRY: dict[tuple, Impl] = {}
_loaded = False


def register(op: str, name: str, **kw) -> Callable:
    """Decorator: ``@register("layernorm", "triton", family="triton", interpret=True)``."""
    if op not in OPS:
        raise MageInputError("register", "op", f"must be one of {list(OPS)}, got {op!r}")

    def deco(fn):
        impl = Impl(op=op, name=name, fn=fn, **kw)
        _REGISTRY[impl.key] = impl
        return fn

    return deco


def load() -> None:
    """Import every kernel module once. A module that cannot import (a missing toolchain) is skipped
    and its reason kept, so a CPU machine still gets the columns it can run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in KERNEL_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and (e.name == mod or mod.startswith(e.name + ".")):
                continue  # that column is not written yet
            LOAD_ERRORS[mod] = repr(e)
        except Exception as e:  # noqa: BLE001 - keep the other columns usable, report this one
            LOAD_ERRORS[mod] = repr(e)


LOAD_ERRORS: dict[str, str] = {}


def impls(op: Optional[str] = None, names=None, dtype: Optional[str] = None) -> list[Impl]:
    load()
    out = [i for i in _REGISTRY.values()
           if (op is None or i.op == op) and (names is None or i.name in names)
           and (dtype is None or i.dtype == dtype)]
    return out


def get(op: str, name: str, dtype: str = "fp32") -> Impl:
    load()
    try:
        return _REGISTRY[(op, name, dtype)]
    except KeyError:
        have = sorted({f"{i.name}/{i.dtype}" for i in _REGISTRY.values() if i.op == op})
        raise MageInputError(op, "impl", f"has no implementation {name!r} at {dtype}; have {have}") from None
