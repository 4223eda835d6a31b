"""The Rust column: kernels written in Rust and compiled to PTX by kernels/rust/build.sh, launched
three ways: from Rust through a C ABI ('rust', and 'rust_scalar' for the first matmul), from Python
through cuda-python ('rust_ptx_py', the same PTX without the Rust launcher), and by a Rust binary
with no Python at all (``native_spans``, rows with impl 'rust_native').
"""
from __future__ import annotations

import ctypes
import functools
import io
import os
import subprocess
import weakref
from pathlib import Path
from typing import Optional

import torch

from mage import ops
from mage.errors import MageInputError
from mage.registry import register

BUILD = Path(os.environ.get("MAGE_RUST_BUILD", Path(__file__).parent / "rust" / "build"))
LIB_PATH, PTX_PATH, NATIVE_PATH = BUILD / "libmage_rust.so", BUILD / "mage_kernels.ptx", BUILD / "rust_native"
KERNELS = ("matmul_scalar", "matmul", "bias_gelu", "layernorm", "triangle", "neighbor_agg", "matmul_2cta",
           "triangle_256")
NOT_BUILT = "the Rust kernels are not built: run `make rust` (kernels/rust/build.sh) first"


class RustKernelError(RuntimeError):
    """A launch the Rust library refused or the CUDA driver failed; ``name`` is the error's name
    (CUDA_ERROR_* from cuGetErrorName, or MAGE_BAD_ARGUMENT and friends from the library)."""

    def __init__(self, code: int, name: str, message: str):
        self.code, self.name = code, name
        super().__init__(f"{name} ({code}): {message}")


# ------------------------------------------------------------------------------------ the library
_U64, _I64, _I32 = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int
_SIGNATURES = {
    "mage_rust_matmul": [_I32, _U64, _U64, _U64, _U64, _I64, _I64, _I64, _I32],
    "mage_rust_bias_gelu": [_I32, _U64, _U64, _U64, _U64, _I64, _I64],
    "mage_rust_layernorm": [_I32, _U64, _U64, _U64, _U64, _U64, _I64, _I64, ctypes.c_float],
    "mage_rust_triangle": [_I32, _U64, _U64, _U64, _U64, _I64, _I64, _I32],
    "mage_rust_neighbor_agg": [_I32, _U64] + [_U64] * 8 + [_I64] * 6,
    "mage_rust_neighbor_plan": [ctypes.POINTER(ctypes.c_int32), _I64, _I64, ctypes.POINTER(ctypes.c_int32), _I64,
                                ctypes.POINTER(_I64), ctypes.POINTER(_I64)],
    "mage_rust_geometry": [_I32, _I64, _I64, ctypes.POINTER(ctypes.c_uint32)],
    "mage_rust_bad_launch": [_I32, _U64],
    "mage_rust_init": [_I32],
    "mage_rust_error_name": [_I32],
}


@functools.lru_cache(maxsize=None)
def _load(path: str):
    lib = ctypes.CDLL(path)
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, _I32
    lib.mage_rust_error_name.restype = ctypes.c_char_p
    lib.mage_rust_last_error.restype = ctypes.c_char_p
    lib.mage_rust_ptx.restype = ctypes.c_char_p
    lib.mage_rust_neighbor_split.restype = _I64
    return lib


_LIB = None  # the loaded library, once found: a stat of its path on every launch costs microseconds


def library():
    """The loaded libmage_rust.so; raises RustKernelError when it has not been built."""
    global _LIB
    if _LIB is None:
        if not LIB_PATH.exists():
            raise RustKernelError(-1, "MAGE_NOT_BUILT", f"{NOT_BUILT} (no {LIB_PATH})")
        _LIB = _load(str(LIB_PATH))
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
        name = lib.mage_rust_error_name(rc).decode()
        raise RustKernelError(rc, name, lib.mage_rust_last_error().decode() or fn_name)


def ptx() -> str:
    """The PTX embedded in the library (the same text every launch path loads)."""
    return library().mage_rust_ptx().decode()


@functools.lru_cache(maxsize=4096)
def geometry(kernel: str, a: int, b: int = 0) -> tuple:
    """(grid, block) of ``kernel`` at sizes (a, b), computed by the Rust library (one definition)."""
    out = (ctypes.c_uint32 * 6)()
    _call("mage_rust_geometry", KERNELS.index(kernel), a, b, out)
    return tuple(out[:3]), tuple(out[3:])


# --------------------------------------------------------------------------------- argument checks
_INDEX_ARGS = ("rowptr", "col")  # int32 graph structure; every other tensor the kernels take is float32


def _on_cuda(op: str, named: dict) -> int:
    for name, t in named.items():
        want = torch.int32 if name in _INDEX_ARGS else torch.float32
        if t.dtype != want:
            # the ops accept bf16 too, but these kernels read and write float32: a bf16 buffer would be
            # read past its end
            raise MageInputError(op, name, f"must be {str(want).replace('torch.', '')} for the Rust kernels, "
                                           f"got {str(t.dtype).replace('torch.', '')}")
        if t.device.type != "cuda":
            raise MageInputError(op, name, f"must be on a CUDA device (the Rust kernels run on the GPU), got {t.device}")
        if not t.is_contiguous():
            raise MageInputError(op, name, "must be contiguous (call .contiguous() first)")
    first = next(iter(named.values()))
    return first.device.index if first.device.index is not None else torch.cuda.current_device()


def _output(op: str, inputs, out):
    spec = ops.OPS[op]
    spec.validate(*inputs)
    shape, dtype = spec.out_spec(*inputs)
    device = inputs[-1].device
    ops.check_out(op, out, shape, dtype, device)
    return out if out is not None else torch.empty(shape, dtype=dtype, device=device)


# The fast path. Checking inputs costs microseconds of Python per call, which at the field-note
# shapes is as long as the kernel: a cheap test that everything is ordinary (plain float32 tensors,
# contiguous, on one CUDA device, shapes that fit) lets the common call skip the full validation.
# When it fails, the full validation runs and raises its error naming the argument (or accepts an
# unusual but valid call), so errors are exactly those of the slow path.
_TENSOR, _F32T = torch.Tensor, torch.float32


def _plain(tensors, ranks) -> int:
    """The CUDA device index when every tensor is a contiguous float32 CUDA tensor of its rank on
    one device, else -1."""
    dev = -1
    for t, rank in zip(tensors, ranks):
        if type(t) is not _TENSOR or t.dtype is not _F32T or t.dim() != rank or not t.is_contiguous():
            return -1
        d = t.get_device()
        if d < 0 or (dev >= 0 and d != dev):
            return -1
        dev = d
    return dev


def _fast(inputs, ranks, out, out_shape_of):
    """(output, device) for an ordinary call, else None (the caller then validates in full).
    ``out_shape_of(*inputs)`` is the output's shape, or None when the sizes do not fit together."""
    dev = _plain(inputs, ranks)
    if dev < 0:
        return None
    shape = out_shape_of(*inputs)
    if shape is None:
        return None
    if out is None:
        x = inputs[0]
        return (torch.empty_like(x) if x.shape == shape else torch.empty(shape, dtype=_F32T, device=x.device)), dev
    if _plain((out,), (len(shape),)) == dev and out.shape == shape:
        return out, dev
    return None


# torch.cuda.current_stream builds a Python Stream object per call (microseconds on the launch path);
# the private getter returns the handle itself. Looked up once, with the public call as the fallback.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: int) -> int:
    """The raw handle of the caller's current stream."""
    return _RAW_STREAM(device) if _RAW_STREAM is not None else torch.cuda.current_stream(device).cuda_stream


# ------------------------------------------------------------------------------ rust: the C ABI path
# Kernel versions (the C ABI's `version`): matmul 0 scalar, 1 tiled, 2 tiled for 2 blocks/SM;
# triangle 0 = 64 x 64 tiles of 512 threads, 1 = 64 x 32 tiles of 256 threads. DEFAULT is what
# 'rust' runs; the others are there to be measured against it (``variant``).
DEFAULT = {"matmul": 1, "triangle": 0}


def _mm_shape(A, B):
    return (A.shape[0], B.shape[1]) if A.shape[1] == B.shape[0] else None


def _bg_shape(x, b):
    return x.shape if b.shape[0] == x.shape[1] else None


def _ln_shape(x, gamma, beta):
    return x.shape if gamma.shape[0] == x.shape[1] == beta.shape[0] > 0 else None  # C = 0 is refused


def _tri_shape(A, B):
    return A.shape if A.shape == B.shape and A.shape[0] == A.shape[1] else None


# Per op: the ranks of its tensor inputs and their output shape (None when the sizes do not fit).
_FAST_SHAPES = {"matmul": ((2, 2), _mm_shape), "bias_gelu": ((2, 1), _bg_shape),
                "layernorm": ((2, 1, 1), _ln_shape), "triangle": ((3, 3), _tri_shape)}


def _prologue(op, inputs, out):
    """(output, device): the fast path for an ordinary call, else the full validation."""
    ranks, shape_of = _FAST_SHAPES[op]
    fast = _fast(inputs, ranks, out, shape_of)
    if fast:
        return fast
    y = _output(op, inputs, out)
    return y, _on_cuda(op, {**dict(zip(ops.OPS[op].args, inputs)), "out": y})


def _matmul(A, B, out=None, version=1):
    C, dev = _prologue("matmul", (A, B), out)
    if C.numel():
        (M, K), N = A.shape, B.shape[1]
        _call("mage_rust_matmul", dev, _stream(dev), A.data_ptr(), B.data_ptr(), C.data_ptr(), M, K, N, version)
    return C


def matmul(A, B, out=None, version=None):
    """C = A B, tiled kernel: 128 x 128 tiles, BLOCK_K = 8, 8 x 8 outputs a thread."""
    return _matmul(A, B, out, DEFAULT["matmul"] if version is None else version)


def matmul_scalar(A, B, out=None):
    """C = A B, one thread per output (the first version)."""
    return _matmul(A, B, out, version=0)


def bias_gelu(x, b, out=None):
    y, dev = _prologue("bias_gelu", (x, b), out)
    if y.numel():
        _call("mage_rust_bias_gelu", dev, _stream(dev), x.data_ptr(), b.data_ptr(), y.data_ptr(), *x.shape)
    return y


def layernorm(x, gamma, beta, out=None):
    y, dev = _prologue("layernorm", (x, gamma, beta), out)
    if y.numel():
        _call("mage_rust_layernorm", dev, _stream(dev), x.data_ptr(), gamma.data_ptr(), beta.data_ptr(),
              y.data_ptr(), *x.shape, ops.EPS_LAYERNORM)
    return y


def triangle(A, B, out=None, version=None):
    O, dev = _prologue("triangle", (A, B), out)
    if O.numel():
        version = DEFAULT["triangle"] if version is None else version
        _call("mage_rust_triangle", dev, _stream(dev), A.data_ptr(), B.data_ptr(), O.data_ptr(), A.shape[0],
              A.shape[2], version)
    return O


# neighbor_agg: the plan (which warp sums which edges) is built once per graph and cached by its
# rowptr tensor, like a sparse library's matrix descriptor; partial sums and flags once per width F.
_PLANS: dict = {}


class _Plan:
    def __init__(self, rowptr: torch.Tensor):
        lib = library()
        rp = rowptr.to("cpu", torch.int32).contiguous()
        n = rp.numel() - 1
        tasks, parts = _I64(), _I64()
        as_i32 = ctypes.POINTER(ctypes.c_int32)
        src = ctypes.cast(rp.data_ptr(), as_i32)
        split = lib.mage_rust_neighbor_split()
        _call("mage_rust_neighbor_plan", src, n, split, None, 0, ctypes.byref(tasks), ctypes.byref(parts))
        self.tasks, self.parts, self.split = tasks.value, parts.value, split
        self.entries = None
        if parts.value:
            host = torch.empty(tasks.value * 6, dtype=torch.int32)
            _call("mage_rust_neighbor_plan", src, n, split, ctypes.cast(host.data_ptr(), as_i32), host.numel(),
                  ctypes.byref(tasks), ctypes.byref(parts))
            self.entries = host.to(rowptr.device)
        self.scratch = {}  # F -> (partial sums [parts, F], flags [parts])

    def buffers(self, F: int, device):
        if not self.parts:
            return 0, 0, 0
        if F not in self.scratch:
            self.scratch[F] = (torch.empty((self.parts, F), dtype=torch.float32, device=device),
                               torch.zeros(self.parts, dtype=torch.int32, device=device))
        ws, flags = self.scratch[F]
        return self.entries.data_ptr(), ws.data_ptr(), flags.data_ptr()


def plan_for(graph: ops.CSRGraph) -> _Plan:
    key = id(graph.rowptr)
    hit = _PLANS.get(key)
    if hit is not None and hit[0]() is graph.rowptr:
        return hit[1]
    plan = _Plan(graph.rowptr)
    _PLANS[key] = (weakref.ref(graph.rowptr), plan)
    return plan


def _neighbor_args(graph, x, y):
    """The kernel's pointer and size arguments, shared by both launch paths: (pointers, sizes, plan)."""
    plan = plan_for(graph)
    entries, ws, flags = plan.buffers(x.shape[1], x.device)
    ptrs = [graph.rowptr.data_ptr(), graph.col.data_ptr(), graph.w.data_ptr(), x.data_ptr(), y.data_ptr(),
            entries, ws, flags]
    sizes = [graph.n, graph.n_src, graph.nnz, x.shape[1], plan.tasks, plan.parts]
    return ptrs, sizes, plan


def _neighbor_prologue(graph, x, out):
    # the graph's tensors were checked by CSRGraph.build; checked again here (cheaply) because a graph
    # can also be made with the plain constructor
    if (type(graph) is ops.CSRGraph and _plain((x,), (2,)) == graph.col.get_device() >= 0
            and graph.rowptr.get_device() == graph.w.get_device() == graph.col.get_device()
            and graph.rowptr.is_contiguous() and graph.col.is_contiguous() and graph.w.is_contiguous()):
        fast = _fast((x,), (2,), out, lambda x: (graph.n, x.shape[1]) if x.shape[0] == graph.n_src else None)
        if fast:
            return fast
    y = _output("neighbor_agg", (graph, x), out)
    dev = _on_cuda("neighbor_agg", {"rowptr": graph.rowptr, "col": graph.col, "w": graph.w, "x": x, "out": y})
    return y, dev


def neighbor_agg(graph, x, out=None):
    y, dev = _neighbor_prologue(graph, x, out)
    if y.numel():
        ptrs, sizes, _ = _neighbor_args(graph, x, y)
        _call("mage_rust_neighbor_agg", dev, _stream(dev), *ptrs, *sizes)
    return y


def neighbor_prepare(graph, x):
    """Builds the plan and scratch buffers outside the timed calls."""
    if graph.col.device.type == "cuda":
        plan_for(graph).buffers(x.shape[1], x.device)
    return graph, x


# ------------------------------------------------------------ rust_ptx_py: the same PTX from Python
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
                      for k in KERNELS}

    def _ok(self, result, what):
        err, *rest = result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, name = self.cu.cuGetErrorName(err)
            raise RustKernelError(int(err), name.decode() if name else str(err), what)
        return rest[0] if rest else None

    def launch(self, kernel, grid, block, stream, params):
        # kernelParams as the address of an array of pointers to the argument values
        holders = [ctype(v) for v, ctype in params]
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
        self.funcs = {k: self.module.get_function(k) for k in KERNELS}
        self.streams = {}
        self.types = {ctypes.c_uint64: np.uint64, ctypes.c_uint32: np.uint32, ctypes.c_float: np.float32}

    def launch(self, kernel, grid, block, stream, params):
        if stream not in self.streams:
            self.streams[stream] = self.cp.cuda.ExternalStream(stream)
        args = tuple(self.types[ctype](v) for v, ctype in params)
        self.funcs[kernel](grid, block, args, stream=self.streams[stream])


_PY_MODULES: dict = {}


def _py_module(device: int):
    """cuda-python's module for ``device``, or CuPy's when cuda-python cannot be used."""
    if device not in _PY_MODULES:
        with torch.cuda.device(device):
            try:
                _PY_MODULES[device] = _PyModule()
            except ImportError:
                _PY_MODULES[device] = _CupyModule()
    return _PY_MODULES[device]


def py_backend(device: int = 0) -> str:
    return _py_module(device).backend


def py_available() -> Optional[str]:
    reason = available()
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


_P, _U32, _F32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_float


def _py_launch(dev, kernel, sizes, params):
    grid, block = geometry(kernel, *sizes)
    mod = _py_module(dev)
    try:
        mod.launch(kernel, grid, block, _stream(dev), params)
    except (TypeError, ValueError) as e:
        if mod.backend != "cuda-python":
            raise
        # cuda-python refused the arguments' form: use CuPy for this device from now on
        import warnings
        warnings.warn(f"rust_ptx_py: cuda-python launch failed ({e}); using CuPy")
        with torch.cuda.device(dev):
            _PY_MODULES[dev] = _CupyModule()
        _PY_MODULES[dev].launch(kernel, grid, block, _stream(dev), params)


def py_matmul(A, B, out=None):
    C, dev = _prologue("matmul", (A, B), out)
    if C.numel():
        (M, K), N = A.shape, B.shape[1]
        _py_launch(dev, ("matmul_scalar", "matmul", "matmul_2cta")[DEFAULT["matmul"]], (M, N), [(A.data_ptr(), _P), (B.data_ptr(), _P), (C.data_ptr(), _P),
                                          (M, _U32), (K, _U32), (N, _U32)])
    return C


def py_bias_gelu(x, b, out=None):
    y, dev = _prologue("bias_gelu", (x, b), out)
    if y.numel():
        R, C = x.shape
        _py_launch(dev, "bias_gelu", (R, C), [(x.data_ptr(), _P), (b.data_ptr(), _P), (y.data_ptr(), _P),
                                             (R, _U32), (C, _U32)])
    return y


def py_layernorm(x, gamma, beta, out=None):
    y, dev = _prologue("layernorm", (x, gamma, beta), out)
    if y.numel():
        R, C = x.shape
        _py_launch(dev, "layernorm", (R, 0), [(x.data_ptr(), _P), (gamma.data_ptr(), _P), (beta.data_ptr(), _P),
                                             (y.data_ptr(), _P), (R, _U32), (C, _U32), (ops.EPS_LAYERNORM, _F32)])
    return y


def py_triangle(A, B, out=None):
    O, dev = _prologue("triangle", (A, B), out)
    if O.numel():
        N, C = A.shape[0], A.shape[2]
        _py_launch(dev, ("triangle", "triangle_256")[DEFAULT["triangle"]], (N, C), [(A.data_ptr(), _P), (B.data_ptr(), _P), (O.data_ptr(), _P),
                                            (N, _U32), (C, _U32)])
    return O


def py_neighbor_agg(graph, x, out=None):
    y, dev = _neighbor_prologue(graph, x, out)
    if y.numel():
        ptrs, sizes, plan = _neighbor_args(graph, x, y)
        _py_launch(dev, "neighbor_agg", (plan.tasks, 0), [(p, _P) for p in ptrs] + [(s, _U32) for s in sizes])
    return y


# ---------------------------------------------------------------- rust_native: no Python at all
def native_spans(op: str, shape: dict, shape_set: str = "field", scalar: bool = False, spans: int = 300,
                 rounds: int = 3, block: int = 10, warmup: int = 10, graph: bool = True, device: int = 0,
                 timeout: float = 600, version: Optional[int] = None):
    """Runs the rust_native binary (its own inputs, the same PTX, the harness's span protocol) and
    returns its rows (event_span per round and overall, graph_span) as a DataFrame in mage's schema."""
    import pandas as pd
    if not NATIVE_PATH.exists():
        raise RustKernelError(-1, "MAGE_NOT_BUILT", f"{NOT_BUILT} (no {NATIVE_PATH})")
    cmd = [str(NATIVE_PATH), "--op", op, "--shape", ops.shape_key(shape), "--shape-set", shape_set,
           "--spans", str(spans), "--rounds", str(rounds), "--block", str(block), "--warmup", str(warmup),
           "--device", str(device)]
    cmd += ["--scalar"] if scalar else []
    cmd += [] if graph else ["--no-graph"]
    if version is None and op in DEFAULT and not scalar:
        version = DEFAULT[op]
    cmd += [] if version is None else ["--version", str(version)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RustKernelError(done.returncode, "RUST_NATIVE_FAILED", done.stderr.strip() or "no message")
    return pd.read_csv(io.StringIO(done.stdout), keep_default_na=False, na_values=[""])


def variant(op: str, version: int):
    """An unregistered Impl running kernel ``version`` of ``op`` (see DEFAULT), to measure against 'rust'."""
    from mage.registry import Impl
    fns = {"matmul": matmul, "triangle": triangle}
    if op not in fns:
        raise MageInputError("rust", "op", f"has versions only for {sorted(fns)}, not {op!r}")
    fn = functools.partial(fns[op], version=version)
    return Impl(op=op, name=f"rust_v{version}", fn=fn, family="rust", needs_cuda=True, available=available,
                config=dict(_CONFIG[op], version=version))


# ---------------------------------------------------------------------------------- registration
_CONFIG = {
    "matmul": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=8, threads=256, per_thread="8x8"),
    "bias_gelu": dict(ROWS=4, cols_per_thread=4, threads="ceil(C/4) to 256"),
    "layernorm": dict(threads=256, rows_per_block=1, in_registers="C <= 4096"),
    "triangle": dict(BLOCK_I=64, BLOCK_J=64, BLOCK_C=8, BLOCK_K=4, threads=512, per_thread="8x8"),
    "neighbor_agg": dict(threads=256, warp_per_task=1, SPLIT=128, MAX_PARTS=1024),
}
_RUST = {"matmul": matmul, "bias_gelu": bias_gelu, "layernorm": layernorm, "triangle": triangle,
         "neighbor_agg": neighbor_agg}
_PY = {"matmul": py_matmul, "bias_gelu": py_bias_gelu, "layernorm": py_layernorm, "triangle": py_triangle,
       "neighbor_agg": py_neighbor_agg}

for _op in ops.OPS:
    _prep = neighbor_prepare if _op == "neighbor_agg" else None
    register(_op, "rust", family="rust", needs_cuda=True, available=available, prepare=_prep,
             config=dict(_CONFIG[_op], launch="C ABI"))(_RUST[_op])
    register(_op, "rust_ptx_py", family="rust", needs_cuda=True, available=py_available, prepare=_prep,
             config=dict(_CONFIG[_op], launch="cuda-python"))(_PY[_op])
register("matmul", "rust_scalar", family="rust", needs_cuda=True, available=available,
         config=dict(threads="16x16", per_thread="1 output", launch="C ABI"))(matmul_scalar)
