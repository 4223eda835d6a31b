"""The Rust column's shared Python face: kernels written in Rust (kernels/<op>/rust.rs), compiled to PTX
by kernels/_rust/build.sh and launched three ways: from Rust through the library's C ABI ('rust', and
'rust_scalar' for the first matmul), from Python through cuda-python ('rust_ptx_py', the same PTX
without the Rust launcher; see ``pymodule``), and by a Rust binary with no Python at all ('rust_native',
which times itself; see ``native``). Each op registers its implementations from its rust_impl.py with
``register_op``; what a kernel takes comes from its table (kernels/<op>/rust_table.py, see ``table``).
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
from pathlib import Path
from typing import Optional

import torch

from . import table

BUILD = Path(os.environ.get("MAGE_RUST_BUILD", Path(__file__).parent / "build"))
LIB_PATH, PTX_PATH, NATIVE_PATH = BUILD / "libmage_rust.so", BUILD / "mage_kernels.ptx", BUILD / "rust_native"
NOT_BUILT = "the Rust kernels are not built: run `make rust` (kernels/_rust/build.sh) first"
TABLE = table.load()  # kernel name -> table.Kernel


class RustKernelError(RuntimeError):
    """A launch the Rust library refused or the CUDA driver failed; ``name`` is the error's name
    (CUDA_ERROR_* from cuGetErrorName, or MAGE_BAD_ARGUMENT and friends from the library)."""

    def __init__(self, code: int, name: str, message: str):
        self.code, self.name = code, name
        super().__init__(f"{name} ({code}): {message}")


# ------------------------------------------------------------------------------------ the library
_U64, _I64, _I32, _P64 = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)
_SIGNATURES = {  # name: (argtypes, restype)
    "mage_rust_launch": ([_I32, _U64, _I32, _P64, _I32], _I32),
    "mage_rust_geometry": ([_I32, _P64, _I32, ctypes.POINTER(ctypes.c_uint32)], _I32),
    "mage_rust_neighbor_plan": ([ctypes.POINTER(ctypes.c_int32), _I64, _I64, ctypes.POINTER(ctypes.c_int32), _I64,
                                 ctypes.POINTER(_I64), ctypes.POINTER(_I64)], _I32),
    "mage_rust_bad_launch": ([_I32, _U64], _I32),
    "mage_rust_init": ([_I32], _I32),
    "mage_rust_kernel_count": ([], _I32),
    "mage_rust_kernel_name": ([_I32], ctypes.c_char_p),
    "mage_rust_error_name": ([_I32], ctypes.c_char_p),
    "mage_rust_last_error": ([], ctypes.c_char_p),
    "mage_rust_ptx": ([], ctypes.c_char_p),
    "mage_rust_neighbor_split": ([], _I64),
}


@functools.lru_cache(maxsize=None)
def _load(path: str):
    lib = ctypes.CDLL(path)
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


_LIB = None  # the loaded library, once found: a stat of its path on every launch costs microseconds
_INDEX: dict = {}  # kernel name -> the library's index of it


def library():
    """The loaded libmage_rust.so; raises RustKernelError when it has not been built."""
    global _LIB
    if _LIB is None:
        if not LIB_PATH.exists():
            raise RustKernelError(-1, "MAGE_NOT_BUILT", f"{NOT_BUILT} (no {LIB_PATH})")
        lib = _load(str(LIB_PATH))
        _INDEX.clear()
        _INDEX.update({lib.mage_rust_kernel_name(i).decode(): i for i in range(lib.mage_rust_kernel_count())})
        _LIB = lib
    return _LIB


def available() -> Optional[str]:
    """None when the library is built and loads, else why not (the registry shows this reason)."""
    if not LIB_PATH.exists():
        return f"{NOT_BUILT} (no {LIB_PATH.name} in {BUILD})"
    try:
        library()
    except OSError as e:
        return f"{LIB_PATH} does not load: {e}"
    return None


def _call(fn_name: str, *args) -> None:
    lib = library()
    rc = getattr(lib, fn_name)(*args)
    if rc:
        raise RustKernelError(rc, lib.mage_rust_error_name(rc).decode(), lib.mage_rust_last_error().decode() or fn_name)


def ptx() -> str:
    """The PTX embedded in the library (the same text every launch path loads)."""
    return library().mage_rust_ptx().decode()


def kernel_names() -> list[str]:
    """The kernels the built library has, in its order."""
    library()
    return list(_INDEX)


# ------------------------------------------------------------------- packed arguments, by the table
@functools.lru_cache(maxsize=None)
def _packing(kernel: str):
    """(library index, ctypes array type, positions of f32 parameters) of ``kernel``."""
    library()
    if kernel not in _INDEX or kernel not in TABLE:
        raise RustKernelError(-1, "MAGE_NO_KERNEL", f"no kernel {kernel!r} in the library ({sorted(_INDEX)}) "
                                                    f"and the tables ({sorted(TABLE)}): rebuild with `make rust`")
    params = TABLE[kernel].params
    return _INDEX[kernel], _U64 * len(params), tuple(i for i, p in enumerate(params) if p.ty == "f32")


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def pack(kernel: str, values) -> tuple:
    """(index, packed array) of ``values``, one per parameter of ``kernel`` in its table's order:
    addresses and sizes as ints (a size below zero travels as its two's complement and is refused by
    the library), f32 parameters as floats."""
    index, array, floats = _packing(kernel)
    if floats:
        values = list(values)
        for i in floats:
            values[i] = _f32_bits(values[i])
    return index, array(*values)


def launch(kernel: str, device: int, values, stream: Optional[int] = None) -> None:
    """Launches ``kernel`` through the library's C ABI on the current stream of ``device``."""
    index, args = pack(kernel, values)
    _call("mage_rust_launch", device, _stream(device) if stream is None else stream, index, args, len(args))


@functools.lru_cache(maxsize=4096)
def _geometry(kernel: str, key: tuple) -> tuple:
    index, args = pack(kernel, key)
    out = (ctypes.c_uint32 * 6)()
    _call("mage_rust_geometry", index, args, len(args), out)
    return tuple(out[:3]), tuple(out[3:])


@functools.lru_cache(maxsize=None)
def _pointers(kernel: str) -> tuple:
    return tuple(p.pointer for p in TABLE[kernel].params)


def geometry(kernel: str, values) -> tuple:
    """(grid, block) of ``kernel`` for its arguments (as ``launch`` takes them), after the library's
    checks; a grid of zeros when there is nothing to launch. One definition: the library's. Cached by
    the sizes (an address counts only as null or not), so a call with new buffers costs a lookup."""
    key = tuple(int(v != 0) if is_ptr else v for v, is_ptr in zip(values, _pointers(kernel)))
    return _geometry(kernel, key)


_TENSOR, _F32T = torch.Tensor, torch.float32


def addresses(values) -> list:
    """The values with each tensor replaced by its address."""
    return [v.data_ptr() if type(v) is _TENSOR else v for v in values]


# torch.cuda.current_stream builds a Python Stream object per call (microseconds on the launch path);
# the private getter returns the handle itself. Looked up once, with the public call as the fallback.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: int) -> int:
    """The raw handle of the caller's current stream."""
    return _RAW_STREAM(device) if _RAW_STREAM is not None else torch.cuda.current_stream(device).cuda_stream


from .checks import dense_prologue, on_cuda, output, plain, fast  # noqa: E402  (they use the above)
from .register import register_op, variant  # noqa: E402

__all__ = ["BUILD", "LIB_PATH", "PTX_PATH", "NATIVE_PATH", "TABLE", "RustKernelError", "library", "available",
           "ptx", "kernel_names", "pack", "launch", "geometry", "addresses", "dense_prologue", "on_cuda",
           "output", "plain", "fast", "register_op", "variant"]
