"""Which implementations exist: (operation, implementation, dtype) -> a callable and what it can run on.

Operations are discovered, not listed: every folder under a kernel root (``kernels/`` by default) that
holds a ``spec.py`` is one operation (its ``facets.py`` beside it: ``mage.facets``), and every other
module in that folder (not ``test_*``, not ``_*``) is imported so that it can register its implementations. Tests, the harness and the pages loop
over this registry; adding an operation is adding a folder, adding a kernel is one ``register`` call.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from . import facets
from .errors import MageInputError
from .ops import OPS, PRECISIONS, Op

ROOTS = [Path(__file__).resolve().parent.parent / "kernels"]  # more with ``add_root`` (tests do)

DTYPES = tuple(PRECISIONS)


@dataclass(frozen=True)
class Impl:
    op: str
    name: str  # e.g. 'pytorch', 'torch_compile', 'triton', 'rust', 'rust_scalar'
    fn: Optional[Callable]  # fn(*inputs, out=None) -> output tensor; None when it only times itself
    dtype: str = "fp32"
    family: str = ""  # 'pytorch', 'triton' or 'rust': the column group in figures
    needs_cuda: bool = True  # False: also runs on CPU tensors
    interpret: bool = False  # runs on CPU under TRITON_INTERPRET=1
    # prepare(*inputs) -> inputs, done once per input set and never timed (building a sparse matrix,
    # compiling). Returns the inputs to pass to fn.
    prepare: Optional[Callable] = None
    # available() -> None when usable, else the reason (library not built, no CUDA, ...)
    available: Callable[[], Optional[str]] = field(default=lambda: None)
    config: dict = field(default_factory=dict)  # the exact tile sizes and the like it runs with
    # An implementation that takes its spans in its own process: own_spans(inputs, shape, shape_set, plan,
    # graph) runs on the harness's input set, executes its SpanPlan and returns {"spans_us", "host_us",
    # "graph_us", "kernel_names"}.
    own_spans: Optional[Callable] = None
    kernels_of: str = ""  # the implementation whose kernel-time rows it shares (it launches the same PTX)
    size_sweep: bool = True  # measured across the size sweep (torch.compile opts out: it recompiles per size)
    # The most work (the spec's FLOPs) it is measured at: a teaching baseline past it would spend minutes of
    # a run's GPU time on one case. Shapes above it get no row (its line in the size sweep ends there).
    max_flops: float = float("inf")
    # limits(shape) -> why it does not take ``shape`` (a library's documented limit, such as a width it
    # needs a multiple of), else None. Such shapes get no row and no check: a call there is refused by
    # its adapter with that reason, never computed wrong.
    limits: Optional[Callable] = None
    # config_for(shape) -> the exact config that runs at ``shape`` (recorded with every row).
    config_for: Optional[Callable] = None
    # Tile choices: the configs a sweep tries (first: the plain one), and variant(**config) -> Impl.
    sweep: tuple = ()
    variant: Optional[Callable] = None

    @property
    def key(self):
        return (self.op, self.name, self.dtype)

    @property
    def callable(self) -> bool:
        return self.fn is not None

    def config_at(self, shape: dict) -> dict:
        """The config that runs at ``shape``."""
        return self.config_for(shape) if self.config_for else dict(self.config)

    def outside_limits(self, shape: dict) -> Optional[str]:
        """Why ``shape`` is outside this implementation's stated limits, or None."""
        return self.limits(shape) if self.limits else None

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
# Roles the kernel packages claim, so the harness can default to them without naming any implementation:
# 'baseline' (the column others are compared with), 'custom' (the project's own kernels a block
# prediction is about), 'library_family' (the family whose columns are differentiable as they are) and
# 'compiled' (the compiler's column, the rival of the memory-bound kernels).
_ROLES: dict[str, str] = {}


def set_role(role: str, name: str) -> None:
    _ROLES[role] = name


def role(role: str) -> str:
    """The implementation (or family) name that claimed ``role``; refuses an unclaimed one."""
    if role not in _ROLES:
        load()
    if role not in _ROLES:
        raise MageInputError("registry", "role", f"no implementation claims the role {role!r}")
    return _ROLES[role]


def claimed(role: str) -> Optional[str]:
    """The name that claimed ``role`` so far, or None (no discovery, no refusal)."""
    return _ROLES.get(role)

LOAD_ERRORS: dict[str, str] = {}
_loaded: set = set()


def register(op: str, name: str, **kw) -> Callable:
    """Decorator: ``@register("layernorm", "triton", family="triton", interpret=True)``."""
    if op not in OPS:
        raise MageInputError("register", "op", f"must be one of {list(OPS)}, got {op!r}")

    def deco(fn):
        impl = Impl(op=op, name=name, fn=fn, **kw)
        _REGISTRY[impl.key] = impl
        return fn

    return deco


# What a kernel package states about one implementation for an extension to read, in a table the
# extension names ('train': its training path; 'stages': its launch-path stages), keyed by (op, name,
# dtype). Kept here so kernels state it without importing any extension; the core never reads them.
_DECLARED: dict[str, dict[tuple, dict]] = {}


def declare(table: str, op: str, name: str, dtype: str = "fp32", **info) -> Callable:
    """Decorator: ``@declare("train", "layernorm", "triton", autocast=True)`` files the decorated object
    as ``dict(info, fn=obj)`` under ``(op, name, dtype)`` in ``table`` (replacing an earlier entry) and
    returns it unchanged."""
    if op not in OPS:
        raise MageInputError("declare", "op", f"must be one of {list(OPS)}, got {op!r}")

    def deco(obj):
        _DECLARED.setdefault(table, {})[(op, name, dtype)] = dict(info, fn=obj)
        return obj

    return deco


def declared(table: str) -> dict:
    """The entries of one table of ``declare``: {(op, name, dtype): dict(info, fn=obj)}."""
    return _DECLARED.setdefault(table, {})


def add(impl: Impl) -> Impl:
    """Register an ``Impl`` built by hand (one that times itself has no ``fn`` to decorate)."""
    if impl.op not in OPS:
        raise MageInputError("register", "op", f"must be one of {list(OPS)}, got {impl.op!r}")
    _REGISTRY[impl.key] = impl
    return impl


def _op_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/spec.py") if not p.parent.name.startswith("_"))


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - keep the other columns usable, report this one
        LOAD_ERRORS[module] = f"{type(e).__name__}: {e}"


def discover_specs() -> None:
    """Import every ``<root>/<op>/spec.py``; each defines ``SPEC``, which joins ``mage.ops.OPS``. Then each
    folder's ``facets.py`` (``mage.facets``), after every spec, so that one may import any spec."""
    found = []
    for root in ROOTS:
        if str(root.parent) not in sys.path:
            sys.path.insert(0, str(root.parent))
        for folder in _op_folders(root):
            mod = f"{root.name}.{folder.name}.spec"
            if mod in _loaded:
                continue
            _loaded.add(mod)
            spec = importlib.import_module(mod).SPEC
            if not isinstance(spec, Op) or spec.name != folder.name:
                raise MageInputError("registry", "SPEC", f"{mod} must define SPEC = Op(name={folder.name!r}, ...)")
            found.append((root, folder, spec))
    for root, folder, _ in found:
        if (folder / "facets.py").exists():
            _loaded.add(f"{root.name}.{folder.name}.facets")
            importlib.import_module(f"{root.name}.{folder.name}.facets")
    for _, _, spec in found:
        OPS.add(spec)


OPS.find = discover_specs  # the specs are found on first use of OPS


def load() -> None:
    """Import every implementation module of every operation once. A module that cannot import (a
    missing toolchain) is skipped and its reason kept, so a CPU machine still gets what it can run."""
    discover_specs()
    for root in ROOTS:
        for folder in _op_folders(root):
            for path in sorted(folder.glob("*.py")):
                if path.stem in ("spec", "facets", "__init__") or path.stem.startswith(("test_", "_")):
                    continue
                mod = f"{root.name}.{folder.name}.{path.stem}"
                if mod not in _loaded:
                    _loaded.add(mod)
                    _import(mod)


def add_root(path) -> None:
    """Another folder of operation folders (a package whose parent is importable); tests use it to add
    an operation from a temporary folder."""
    path = Path(path).resolve()
    if path not in ROOTS:
        ROOTS.append(path)
    load()


def _sort_key(i: Impl):
    dt = DTYPES.index(i.dtype) if i.dtype in DTYPES else len(DTYPES)
    # column position: the 'order' facet of the implementation's name (mage.facets.declare_column)
    return (list(OPS).index(i.op) if i.op in OPS else 99, facets.column_declared(i.name, "order", 50), i.name, dt)


def impls(op: Optional[str] = None, names=None, dtype: Optional[str] = None) -> list[Impl]:
    load()
    out = [i for i in _REGISTRY.values()
           if (op is None or i.op == op) and (names is None or i.name in names)
           and (dtype is None or i.dtype == dtype)]
    return sorted(out, key=_sort_key)


def impl_names() -> list[str]:
    """Every implementation name, in column order."""
    return list(dict.fromkeys(i.name for i in impls()))


def get(op: str, name: str, dtype: str = "fp32") -> Impl:
    load()
    try:
        return _REGISTRY[(op, name, dtype)]
    except KeyError:
        have = sorted({f"{i.name}/{i.dtype}" for i in _REGISTRY.values() if i.op == op})
        raise MageInputError(op, "impl", f"has no implementation {name!r} at {dtype}; have {have}") from None
