"""A Triton kernel compiled for sm_90a (Hopper) on a machine without a GPU, and what it would ask of the
card: registers, local memory (spills) and shared memory a block. Triton's wheel carries ptxas and
cuobjdump, so this is the compile the JIT makes on an H100 or H200, minus the launch.

Why: a config that spills or asks for more than a block's 227 KB of shared memory fails, or crawls, only on
the GPU; checking it here keeps such a config out of a tile table's rule before any device time is spent.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import triton

SHARED_LIMIT = 227 * 1024  # bytes of shared memory one block may use on sm_90
_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def available() -> bool:
    return _BIN.is_file()


def resources(fn, signature: dict, constexprs: dict, num_warps: int, num_stages: int) -> dict:
    """{'registers', 'stack' (bytes a thread in local memory: spills), 'shared' (bytes a block)} of ``fn``
    compiled for sm_90a. ``signature``: argument -> Triton type ('*bf16', 'i32', ...; constexprs as
    'constexpr'); ``constexprs``: their values."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_stages=num_stages))
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(k.asm["cubin"])
        usage = subprocess.run([str(_BIN), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                               check=True).stdout
    field = lambda name: int(re.search(rf"{name}:(\d+)", usage).group(1))  # noqa: E731
    return dict(registers=field("REG"), stack=field("STACK"), shared=k.metadata.shared)
