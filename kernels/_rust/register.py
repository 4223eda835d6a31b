"""How an op's Rust kernels become registered implementations: 'rust' (the C ABI), 'rust_ptx_py'
(cuda-python), 'rust_native' (the Rust binary, timing itself) and any extra kernel an op names
('rust_scalar' for matmul). Each is the op's prologue (checks and output), then the op's ``args`` (one
value per kernel parameter, in its table's order) launched one of the three ways."""
from __future__ import annotations

from typing import Callable, Optional

from mage.errors import MageInputError
from mage.registry import Impl, add

from . import available, launch, native, pymodule

# How figures and prose name each implementation, its colour and its column within the Rust family.
# label, column order (after PyTorch and Triton), colour (Okabe-Ito: vermillion, purple, black, yellow)
LOOK = {"rust": ("Rust", 20, "#D55E00"), "rust_scalar": ("Rust (scalar)", 21, "#CC79A7"),
        "rust_ptx_py": ("Rust PTX from Python", 22, "#000000"),
        "rust_native": ("Rust PTX from a Rust binary", 23, "#F0E442")}
_OPS: dict = {}  # op -> what register_op was given, for ``variant``


def _fn(kernel: str, prologue: Callable, args: Callable, via: Callable) -> Callable:
    def fn(*inputs, out=None):
        y, dev = prologue(inputs, out)
        if y.numel():
            via(kernel, dev, args(*inputs, y))
        return y
    fn.__name__ = fn.__qualname__ = f"rust_{kernel}"
    return fn


def _c_abi(kernel, dev, values):
    from . import addresses
    launch(kernel, dev, addresses(values))


def _impl(op, name, fn, **kw) -> Impl:
    label, order, color = LOOK[name]
    return Impl(op=op, name=name, fn=fn, family="rust", label=label, order=order, color=color, needs_cuda=True, **kw)


def register_op(op: str, kernel: str, args: Callable, prologue: Callable, config: dict,
                prepare: Optional[Callable] = None, versions: tuple = (), extra: Optional[dict] = None) -> None:
    """Registers ``op``'s Rust implementations. ``kernel``: the PTX kernel 'rust' runs; ``args(*inputs,
    out)``: its arguments; ``prologue(inputs, out)`` -> (output, device); ``versions``: kernel names by
    version number, for ``variant``; ``extra``: {impl name: (kernel, config)} run through the C ABI."""
    _OPS[op] = dict(args=args, prologue=prologue, config=config, prepare=prepare, versions=versions)
    add(_impl(op, "rust", _fn(kernel, prologue, args, _c_abi), available=available, prepare=prepare,
              config=dict(config, launch="C ABI")))
    add(_impl(op, "rust_ptx_py", _fn(kernel, prologue, args, pymodule.launch), available=pymodule.available,
              prepare=prepare, config=dict(config, launch="cuda-python")))
    for name, (k, cfg) in (extra or {}).items():
        add(_impl(op, name, _fn(k, prologue, args, _c_abi), available=available, prepare=prepare,
                  config=dict(cfg, launch="C ABI")))
    add(_impl(op, "rust_native", None, available=native.available, own_spans=native.own_spans(op, kernel, args),
              kernels_of="rust_ptx_py", config=dict(kernel=kernel)))


def variant(op: str, version: int) -> Impl:
    """An unregistered Impl running kernel ``version`` of ``op`` (its rust_impl's VERSIONS), to measure
    against 'rust'."""
    got = _OPS.get(op)
    if not got or not got["versions"]:
        have = sorted(o for o, g in _OPS.items() if g["versions"])
        raise MageInputError("rust", "op", f"has versions only for {have}, not {op!r}")
    if not 0 <= version < len(got["versions"]):
        raise MageInputError(op, "version", f"must be in 0..{len(got['versions']) - 1} "
                                            f"({', '.join(got['versions'])}), got {version}")
    fn = _fn(got["versions"][version], got["prologue"], got["args"], _c_abi)
    return Impl(op=op, name=f"rust_v{version}", fn=fn, family="rust", needs_cuda=True, available=available,
                prepare=got["prepare"], config=dict(got["config"], version=version))


__all__ = ["register_op", "variant"]
