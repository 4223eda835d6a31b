"""A Triton kernel compiled for sm_90a (Hopper) on a machine without a GPU, and what it would ask of the
card: registers, local memory (spills) and shared memory a block. Triton's wheel carries ptxas and
cuobjdump, so this is the compile the JIT makes on an H100 or H200, minus the launch.

Why: a config that spills or asks for more than a block's 227 KB of shared memory fails, or crawls, only on
the GPU; checking it here keeps such a config out of a tile table's rule before any device time is spent.
Under TRITON_INTERPRET=1 (the test suite's setting) ``triton.jit`` makes interpreted functions, which
compile nothing: the compile then runs in a child process without it.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

SHARED_LIMIT = 227 * 1024  # bytes of shared memory one block may use on sm_90
_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
_ROOT = Path(__file__).resolve().parents[2]


def available() -> bool:
    return _BIN.is_file()


def resources(kernel: str, signature: dict, constexprs: dict, num_warps: int, num_stages: int,
              aligned=(), maxnreg: int = 0) -> dict:
    """{'registers', 'stack' (bytes a thread in local memory: spills), 'shared' (bytes a block)} of the
    kernel ``'module:name'`` compiled for sm_90a. ``signature``: argument -> Triton type ('*bf16', 'i32',
    ...; constexprs as 'constexpr'); ``constexprs``: their values; ``aligned``: the arguments a launch at
    the measured sizes passes as multiples of 16 (pointers 16-byte aligned), as the JIT specialises;
    ``maxnreg``: the launch's register ceiling a thread (0: none)."""
    job = dict(kernel=kernel, signature=signature, constexprs=constexprs, num_warps=num_warps,
               num_stages=num_stages, aligned=list(aligned), maxnreg=maxnreg)
    if os.environ.get("TRITON_INTERPRET") != "1":
        return _compile(job)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "kernels._triton.sm90", json.dumps(job)], cwd=_ROOT, env=env,
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"compiling {kernel} for sm_90a failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _compile(job: dict) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    module, name = job["kernel"].split(":")
    fn = getattr(importlib.import_module(module), name)
    names = list(job["signature"])
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in job["aligned"]}
    src = ASTSource(fn=fn, signature=job["signature"], constexprs=job["constexprs"], attrs=attrs)
    options = dict(num_warps=job["num_warps"], num_stages=job["num_stages"])
    if job.get("maxnreg"):
        options["maxnreg"] = job["maxnreg"]
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(k.asm["cubin"])
        usage = subprocess.run([str(_BIN), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                               check=True).stdout
    field = lambda key: int(re.search(rf"{key}:(\d+)", usage).group(1))  # noqa: E731
    return dict(registers=field("REG"), stack=field("STACK"), shared=k.metadata.shared)


def gluon_resources(fn, signature: dict, constexprs: dict, aligned=(), num_warps: int = 4, ptx_counts=()) -> dict:
    """A Gluon kernel compiled for sm_90a here (Gluon has no interpreter, so it compiles in this process unless
    TRITON_INTERPRET is set: the caller runs it in a child then): {'registers' (the launch's; each
    partition's ``setmaxnreg`` moves it), 'stack', 'shared', 'ceilings' (the setmaxnreg values in the PTX),
    'local' (spill loads and stores in the SASS), 'waits' (each wgmma wait's group count, in order),
    'used' (the highest register each register budget's code touches, from the SASS), 'counts' (how often each
    of ``ptx_counts``, PTX instruction names, occurs in the PTX)}."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    names = list(signature)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    k = triton.compile(GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_stages=1))
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(k.asm["cubin"])
        usage = subprocess.run([str(_BIN), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([str(_BIN), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    used, budget = {}, "entry"
    for line in sass.splitlines():  # code after a USETMAXREG runs under that budget, until the next one
        if m := re.search(r"USETMAXREG\.\w+\.CTAPOOL\s+(?:UP\d,\s*)?(0x[0-9a-f]+)", line):
            budget = int(m.group(1), 16)
        elif regs := [int(r) for r in re.findall(r"\bR(\d+)\b", line)]:
            used[budget] = max(used.get(budget, 0), max(regs) + 1)
    field = lambda key: int(re.search(rf"{key}:(\d+)", usage).group(1))  # noqa: E731
    return dict(registers=field("REG"), stack=field("STACK"), shared=k.metadata.shared,
                ceilings=[int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", k.asm["ptx"])],
                local=len(re.findall(r"\b(?:LDL|STL)\b", sass)),
                waits=re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass), used=used,
                counts={p: k.asm["ptx"].count(p + " ") for p in ptx_counts})


if __name__ == "__main__":  # the child process: one job as JSON in, its resources as JSON out
    print(json.dumps(_compile(json.loads(sys.argv[1]))))
