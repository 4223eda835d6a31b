"""How an op's Rust kernels become registered implementations: 'rust' (the C ABI), 'rust_ptx_py'
(cuda-python), 'rust_native' (the Rust binary, timing itself) and any extra kernel an op names
('rust_scalar' for matmul). Each is the op's prologue (checks and output), then the op's ``args`` (one
value per kernel parameter, in its table's order) launched one of the three ways."""
from __future__ import annotations

import ctypes
import functools
from typing import Callable, Optional

import torch

from mage import facets
from mage.errors import MageInputError
from mage.registry import Impl, add

from . import RustKernelError, _call, _f32_bits, available, launch, library, native, pymodule
from .native import block_name, dtype_of

# How figures and prose name each implementation, its column within the Rust family (after PyTorch
# and Triton) and its colour (Okabe-Ito: vermillion, purple, black, yellow)
facets.declare_column("rust", label="Rust", order=20, color="#D55E00")
facets.declare_column("rust_scalar", label="Rust (scalar)", order=21, color="#CC79A7")
facets.declare_column("rust_ptx_py", label="Rust PTX from Python", order=22, color="#000000")
facets.declare_column("rust_native", label="Rust PTX from a Rust binary", order=23, color="#F0E442")
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
    return Impl(op=op, name=name, fn=fn, family="rust", needs_cuda=True, **kw)


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


# ------------------------------------------------------------------------------ the model blocks
# A block runs in Rust as a whole (host/src/blocks.rs): its kernels and cuBLAS GEMMs in order, from one
# C call with its arguments packed one u64 each. Python validates (naming the block and the argument),
# allocates the output and one scratch buffer (PyTorch's allocator: graph-safe), and calls once.
_U64 = ctypes.c_uint64
_BLOCK_SIGNATURES = {
    "mage_rust_block_run": ([ctypes.c_char_p, ctypes.c_int, _U64, ctypes.POINTER(_U64), ctypes.c_int], ctypes.c_int),
    "mage_rust_block_check": ([ctypes.c_char_p, ctypes.POINTER(_U64), ctypes.c_int], ctypes.c_int),
    "mage_rust_block_info": ([ctypes.c_char_p, _U64, _U64, _U64, ctypes.POINTER(_U64)], ctypes.c_int),
    "mage_rust_block_cublas": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
}


@functools.lru_cache(maxsize=None)
def _block_lib(lib):
    for name, (argtypes, restype) in _BLOCK_SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


def block_lib():
    """The library with its block entry points typed (raises RustKernelError when it is not built)."""
    return _block_lib(library())


def block_pack(values):
    """The packed u64 array of a block's values: tensors as addresses, floats as their f32 bits, a size
    below zero as its two's complement (the library refuses it)."""
    out = []
    for v in values:
        if type(v) is torch.Tensor:
            v = v.data_ptr()
        elif isinstance(v, float):
            v = _f32_bits(v)
        out.append(int(v) & (2 ** 64 - 1))
    return (_U64 * len(out))(*out)


@functools.lru_cache(maxsize=4096)
def block_info(op: str, rows: int, width: int, hidden: int) -> tuple:
    """(floats of scratch, kernels launched per call) of block ``op`` at these sizes: the library's."""
    lib, out = block_lib(), (_U64 * 2)()
    _call("mage_rust_block_info", op.encode(), rows, width, hidden, out)
    return int(out[0]), int(out[1])


def block_check(op: str, values) -> None:
    """The library's checks of a block's packed values, without a GPU (raises RustKernelError)."""
    block_lib()
    args = block_pack(values)
    _call("mage_rust_block_check", op.encode(), args, len(args))


def block_cublas(op: str) -> str:
    """Loads cuBLAS for block ``op`` (no GPU needed); the file loaded. Raises RustKernelError
    (MAGE_NO_CUBLAS, naming the block and MAGE_CUBLAS) when it cannot."""
    block_lib()
    path = ctypes.create_string_buffer(4096)
    _call("mage_rust_block_cublas", op.encode(), path, len(path))
    return path.value.decode()


def block_run(op: str, device: int, values, stream: Optional[int] = None) -> None:
    """Runs block ``op`` from Rust on the current stream of ``device`` with its packed ``values``."""
    from . import _stream
    lib = block_lib()
    args = block_pack(values)
    rc = lib.mage_rust_block_run(op.encode(), device, _stream(device) if stream is None else stream, args, len(args))
    if rc:
        raise RustKernelError(rc, lib.mage_rust_error_name(rc).decode(), lib.mage_rust_last_error().decode())


def register_block(op: str, fn: Callable, native_values: Callable, config: dict,
                   prepare: Optional[Callable] = None, dtype: str = "fp32") -> None:
    """Registers block ``op``'s Rust columns at ``dtype``: 'rust' (``fn``, the C ABI) and 'rust_native'
    (the Rust binary runs the whole block; ``native_values(*inputs)`` -> (packed values, indices of the
    outputs and scratch, which travel as sizes)). The library's block at ``dtype`` is ``block_name``'s."""
    add(_impl(op, "rust", fn, available=available, prepare=prepare, dtype=dtype,
              config=dict(config, launch="C ABI")))
    add(_impl(op, "rust_native", None, available=native.available, own_spans=native.block_own_spans(op, native_values),
              kernels_of="rust", dtype=dtype, config=dict(kernel=block_name(op, dtype))))


__all__ = ["register_op", "variant", "register_block", "block_run", "block_info", "block_check", "block_cublas",
           "block_name", "dtype_of"]
