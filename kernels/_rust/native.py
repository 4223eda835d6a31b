"""'rust_native': the Rust binary that launches the library's kernels with no Python in the loop. The
harness gives it a ``mage.timing.SpanPlan``; it executes the plan and returns the raw spans, so the
protocol exists once, in mage.timing. Inputs are the op's own seeded inputs, built here and handed to
the binary as a file of the kernel's arguments (in its table's order)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import tempfile
from typing import Callable, Optional

import torch

from mage import ops
from mage.errors import MageInputError

from . import NATIVE_PATH, NOT_BUILT, TABLE, RustKernelError, _f32_bits


def available() -> Optional[str]:
    if not NATIVE_PATH.exists():
        return f"{NOT_BUILT} (no {NATIVE_PATH})"
    return None


def args_file(kernel: str, values) -> bytes:
    """The argument file rust_native reads: a u32 count, then per parameter a tag and a u64: 0 a value,
    1 that many bytes to upload (an input tensor's), 2 that many zero bytes (an output or scratch)."""
    params = TABLE[kernel].params
    if len(values) != len(params):
        raise RustKernelError(-1, "MAGE_BAD_ARGUMENT", f"{kernel} takes {len(params)} arguments, got {len(values)}")
    out = [struct.pack("<I", len(values))]
    for v, p in zip(values, params):
        if isinstance(v, torch.Tensor):
            data = v.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
            out.append(struct.pack("<BQ", 2, len(data)) if p.output else struct.pack("<BQ", 1, len(data)) + data)
        elif p.ty == "f32":
            out.append(struct.pack("<BQ", 0, _f32_bits(v)))
        else:
            out.append(struct.pack("<BQ", 0, int(v) & (2 ** 64 - 1)))
    return b"".join(out)


def block_args_file(values, outputs) -> bytes:
    """The argument file of a model block (rust_native --block): its packed values in order, tensors
    uploaded, except those at the indices ``outputs`` (the output, scratch), which travel as sizes and
    start as zeros on the device; floats as f32 bits; other numbers as they are."""
    out = [struct.pack("<I", len(values))]
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            data = v.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
            out.append(struct.pack("<BQ", 2, len(data)) if i in outputs else struct.pack("<BQ", 1, len(data)) + data)
        elif isinstance(v, float):
            out.append(struct.pack("<BQ", 0, _f32_bits(v)))
        else:
            out.append(struct.pack("<BQ", 0, int(v) & (2 ** 64 - 1)))
    return b"".join(out)


def cublas_dir() -> Optional[str]:
    """The folder of the cuBLAS this process has loaded (PyTorch's, from pip's nvidia-cublas), else the
    nvidia-cublas package's, else None: the binary has no Python to find it, so it is told."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "/libcublas.so" in path:
                    return os.path.dirname(path)
    except OSError:
        pass
    try:
        import nvidia.cublas as nc
        lib = os.path.join(list(nc.__path__)[0], "lib")
        return lib if os.path.isdir(lib) else None
    except ImportError:
        return None


def run(kernel: str, values, plan, graph: bool = True, device: int = 0, timeout: float = 600,
        block: bool = False, outputs=(), out_path: Optional[str] = None) -> dict:
    """Runs rust_native on ``kernel`` (a model block's name with ``block``) with ``values`` under
    ``plan``; its JSON as a dict."""
    if available():
        raise RustKernelError(-1, "MAGE_NOT_BUILT", available())
    env = dict(os.environ)
    if block and not env.get("MAGE_CUBLAS") and cublas_dir():
        env["MAGE_CUBLAS"] = cublas_dir()
    with tempfile.NamedTemporaryFile(prefix="mage_rust_args_", suffix=".bin") as f:
        f.write(block_args_file(values, outputs) if block else args_file(kernel, values))
        f.flush()
        cmd = [str(NATIVE_PATH), "--block" if block else "--kernel", kernel, "--args", f.name, "--plan",
               plan.to_json(), "--device", str(device)] + ([] if graph else ["--no-graph"])
        cmd += ["--out", out_path] if out_path else []
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode:
        raise RustKernelError(done.returncode, "RUST_NATIVE_FAILED", done.stderr.strip() or "no message")
    return json.loads(done.stdout)


def dry_run(plan) -> dict:
    """The rounds rust_native would time, in order, for ``plan`` (no GPU needed)."""
    if available():
        raise RustKernelError(-1, "MAGE_NOT_BUILT", available())
    done = subprocess.run([str(NATIVE_PATH), "--dry-run", "--plan", plan.to_json()], capture_output=True,
                          text=True, timeout=60)
    if done.returncode:
        raise RustKernelError(done.returncode, "RUST_NATIVE_FAILED", done.stderr.strip() or "no message")
    return json.loads(done.stdout)


def own_spans(op: str, kernel: str, args: Callable) -> Callable:
    """The ``own_spans(inputs, shape, shape_set, plan, graph)`` of op's 'rust_native': the harness's input
    set (the one the other implementations ran on), copied to the host and uploaded by the binary;
    ``args`` gives the kernel's arguments."""
    def spans(inputs, shape: dict, shape_set: str, plan, graph: bool = True) -> dict:
        inputs = tuple(t.to("cpu") for t in inputs)
        out = ops.OPS[op].empty_out(*inputs)
        return run(kernel, args(*inputs, out), plan, graph)
    return spans


def block_name(op: str, dtype: str = "fp32") -> str:
    """The library's name of block ``op`` at ``dtype``: the op's name at fp32, 'op.bf16' at bf16."""
    if dtype not in ("fp32", "bf16"):
        raise MageInputError(op, "dtype", f"the Rust block runs fp32 or bf16, not {dtype!r}")
    return op if dtype == "fp32" else f"{op}.{dtype}"


def dtype_of(t: torch.Tensor) -> str:
    """'bf16' for a bfloat16 tensor, else 'fp32' (the block's own validation refuses other dtypes)."""
    return "bf16" if t.dtype == torch.bfloat16 else "fp32"


def _block(op: str, inputs) -> str:
    """The library's name of block ``op`` at its inputs' precision (the output's dtype says it)."""
    return block_name(op, dtype_of(ops.OPS[op].empty_out(*inputs)))


def block_own_spans(op: str, values: Callable) -> Callable:
    """The ``own_spans`` of a model block's 'rust_native': the whole block run by the binary on the
    harness's input set, at its precision; ``values(*inputs)`` -> (packed values, indices that travel
    as sizes)."""
    def spans(inputs, shape: dict, shape_set: str, plan, graph: bool = True) -> dict:
        inputs = tuple(t.to("cpu") for t in inputs)
        vals, outputs = values(*inputs)
        return run(_block(op, inputs), vals, plan, graph, block=True, outputs=outputs)
    return spans


def block_output(op: str, values: Callable, inputs, timeout: float = 300) -> torch.Tensor:
    """Block ``op``'s output as rust_native computes it (on the host, in the output's dtype: float32 or
    bfloat16), for comparison."""
    from mage.timing import SpanPlan
    inputs = tuple(t.to("cpu") for t in inputs)
    vals, outputs = values(*inputs)
    y = ops.OPS[op].empty_out(*inputs)
    with tempfile.NamedTemporaryFile(prefix="mage_rust_out_", suffix=".bin") as f:
        run(_block(op, inputs), vals, SpanPlan.make(n=1, rounds=1, block=1, warmup=0), graph=False, timeout=timeout,
            block=True, outputs=outputs, out_path=f.name)
        data = f.read()
    return torch.frombuffer(bytearray(data), dtype=y.dtype).reshape(y.shape) if data else y.zero_()
