"""'rust_ptx_py': the library's PTX launched from Python through cuda-python's driver bindings (CuPy's
RawModule when cuda-python is missing or refuses), with the geometry and checks of the library and the
argument types of the kernel's table."""
from __future__ import annotations

import ctypes
import warnings
from typing import Optional

import torch

from mage.errors import MageWarning

from . import PTX_PATH, TABLE, RustKernelError, _stream, addresses, geometry, kernel_names
from . import available as lib_available

# ctypes type of each table parameter type, as the kernel reads it
_CTYPE = {"u32": ctypes.c_uint32, "f32": ctypes.c_float}


def _ctypes_of(kernel: str) -> list:
    return [_CTYPE.get(p.ty, ctypes.c_uint64) for p in TABLE[kernel].params]


class _PyModule:
    """The PTX loaded through cuda-python's driver bindings in the current (primary) context."""

    backend = "cuda-python"

    def __init__(self):
        from cuda.bindings import driver as cu  # cuda-bindings, on the GPU machine
        self.cu = cu
        torch.cuda.init()
        text = PTX_PATH.read_bytes() + b"\0"
        self.module = self._ok(cu.cuModuleLoadData(text), "cuModuleLoadData")
        self.funcs = {k: self._ok(cu.cuModuleGetFunction(self.module, k.encode()), "cuModuleGetFunction")
                      for k in kernel_names()}

    def _ok(self, result, what):
        err, *rest = result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, name = self.cu.cuGetErrorName(err)
            raise RustKernelError(int(err), name.decode() if name else str(err), what)
        return rest[0] if rest else None

    def launch(self, kernel, grid, block, stream, values):
        # kernelParams as the address of an array of pointers to the argument values
        holders = [ctype(v) for v, ctype in zip(values, _ctypes_of(kernel))]
        array = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        self._ok(self.cu.cuLaunchKernel(self.funcs[kernel], *grid, *block, 0, self.cu.CUstream(stream),
                                        ctypes.addressof(array), 0), f"cuLaunchKernel({kernel})")


class _CupyModule:
    """The same PTX through CuPy's RawModule: the fallback when cuda-python is missing or refuses."""

    backend = "cupy"

    def __init__(self):
        import cupy
        import numpy as np
        self.cp, self.np = cupy, np
        self.module = cupy.RawModule(path=str(PTX_PATH))
        self.funcs = {k: self.module.get_function(k) for k in kernel_names()}
        self.streams = {}
        self.types = {ctypes.c_uint64: np.uint64, ctypes.c_uint32: np.uint32, ctypes.c_float: np.float32}

    def launch(self, kernel, grid, block, stream, values):
        if stream not in self.streams:
            self.streams[stream] = self.cp.cuda.ExternalStream(stream)
        args = tuple(self.types[ctype](v) for v, ctype in zip(values, _ctypes_of(kernel)))
        self.funcs[kernel](grid, block, args, stream=self.streams[stream])


_MODULES: dict = {}


def _module(device: int):
    """cuda-python's module for ``device``, or CuPy's when cuda-python cannot be used."""
    if device not in _MODULES:
        with torch.cuda.device(device):
            try:
                _MODULES[device] = _PyModule()
            except ImportError:
                _MODULES[device] = _CupyModule()
    return _MODULES[device]


def backend(device: int = 0) -> str:
    return _module(device).backend


def available() -> Optional[str]:
    reason = lib_available()
    if reason:
        return reason
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError as e:
        try:
            import cupy  # noqa: F401
        except ImportError:
            return f"neither cuda-python (cuda-bindings) nor CuPy is installed: {e}"
    return None


def launch(kernel: str, dev: int, values) -> None:
    """Launches ``kernel`` with ``values`` (tensors or numbers, in its table's order) from Python."""
    values = addresses(values)
    grid, block = geometry(kernel, values)  # the library's checks and geometry, cached by the sizes
    mod = _module(dev)
    try:
        mod.launch(kernel, grid, block, _stream(dev), values)
    except (TypeError, ValueError) as e:
        if mod.backend != "cuda-python":
            raise
        # cuda-python refused the arguments' form: use CuPy for this device from now on
        warnings.warn(f"rust_ptx_py: cuda-python launch failed ({e}); using CuPy", MageWarning)
        with torch.cuda.device(dev):
            _MODULES[dev] = _CupyModule()
        _MODULES[dev].launch(kernel, grid, block, _stream(dev), values)
