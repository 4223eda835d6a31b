"""A lean launch of a Triton kernel: ``launch(kernel, grid, *args, **kwargs)`` does what
``kernel[grid](*args, **kwargs)`` does, with less host time on every call after the first.

What Triton 3.6's ``JITFunction.run`` does per call: reads the debug and instrumentation knobs, the
current device and stream, runs the pre-run hooks, binds the arguments (a generated binder calling the
native ``specialize_impl`` on each), turns the specialization and ``str(options)`` into a cache key,
looks the compiled kernel up, checks that the kernel's global values have not changed, builds a launch
metadata object for the launch hooks, and calls the compiled launcher (a Python wrapper that allocates
any scratch, then the C launcher, which for every pointer asks the driver what the pointer is).

What this module does per call, once a kernel has run with a given specialization: a key of the facts
Triton specialises on, computed here (for a tensor: its dtype and whether its address is a multiple of
16; for an int: whether it is 1, whether it is a multiple of 16, and its width, i32, i64 or u64; for a
constexpr: its value; the type of every argument; every keyword (constexprs and launch options such as
num_warps and num_stages) with its value and type; the device; the debug and instrumentation knobs),
one dict look-up, and the C launcher called directly with the pointers as integers. The key is never
coarser than Triton's: two calls with one key would compile to one kernel. A call the key cannot
describe (an argument of another type, a runtime argument passed by keyword, a callable grid, a
launch or pre-run hook installed, the interpreter) takes Triton's own path, every time.

What it skips on a hit: the global-value check (done by Triton on each first call of a
specialization) and the driver's pointer query (the launchers check every tensor's device first;
a tensor not on a CUDA device is in the key, and such a call takes Triton's path, which refuses it).
"""
from __future__ import annotations

import torch
from triton import knobs
from triton.runtime.jit import JITFunction

I32_LO, I32_HI, I64_LO, U64_LO, U64_HI = -2**31, 2**31, -2**63, 2**63, 2**64
_TENSORS = (torch.Tensor, torch.nn.Parameter)
FACTS_TENSOR = frozenset(_TENSORS)
_MAX_ENTRIES = 256  # specializations kept per kernel (a sweep may make a few dozen)


def _int_fact(x: int):
    # Triton makes 1 a constant; any other int is i32, i64 or u64 by its range and 16-divisible or not
    # (C and Python agree on x % 16 == 0 for negatives too); past 64 bits Triton refuses the value
    if x == 1:
        return 1
    return (x & 15 == 0, I32_LO <= x < I32_HI, x >= U64_LO, I64_LO <= x < U64_HI)


def _bool_fact(x: bool):
    return x  # Triton: 'u1', not specialised (the value: a finer key, never a wrong one)


def _float_fact(x: float):
    return None  # Triton: 'fp32', not specialised


def _none_fact(x):
    return None  # Triton: the constant None


def _tensor_fact(t):
    return (t.dtype, t.data_ptr() & 15 == 0, t.is_cuda)


# facts of a runtime (non-constexpr) argument, by exact type; any other type takes Triton's path
FACTS = {int: _int_fact, bool: _bool_fact, float: _float_fact, type(None): _none_fact}
FACTS.update({t: _tensor_fact for t in _TENSORS})


def _current_device() -> int:
    return torch._C._cuda_getDevice()


def _current_stream(device: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device)


class _Unsupported(Exception):
    """A call this launcher does not describe: it takes Triton's own path."""


class _Lean:
    """The lean launches of one JITFunction: its parameters and the launchers found so far."""

    def __init__(self, kernel: JITFunction):
        self.kernel = kernel
        self.names = tuple(kernel.arg_names)
        self.const = tuple(p.is_constexpr for p in kernel.params)
        self.defaults = {p.name: p.default for p in kernel.params if p.has_default}
        # a runtime argument given by keyword would need its facts, not its value, in the key
        self.runtime_names = frozenset(p.name for p in kernel.params if not p.is_constexpr)
        self.entries: dict = {}

    def key(self, device: int, args: tuple, kw: dict):
        """The specialization key of a call (KeyError for an argument of a type it does not know)."""
        facts = tuple([a if c else FACTS[type(a)](a) for c, a in zip(self.const, args)])
        return (device, tuple(map(type, args)), facts, tuple(kw.items()), tuple(map(type, kw.values())),
                knobs.runtime.debug, knobs.compilation.instrumentation_mode)

    def entry(self, args: tuple, kw: dict, compiled):
        """What a hit needs: the C launcher, the kernel handle and metadata, and the recipe of the
        argument list (the parameters after the positional ones, from keywords or defaults)."""
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        launcher = compiled.run  # loads the module on first use; a launch just did
        tail = tuple((n, kw[n] if n in kw else self.defaults.get(n)) for n in self.names[len(args):])
        if any(n not in kw and n not in self.defaults for n, _ in tail):
            raise _Unsupported
        direct = getattr(launcher, "launch", None)
        plain = (direct is not None and not launcher.global_scratch_size and not launcher.profile_scratch_size
                 and type(launcher).__name__ == "CudaLauncher")
        if plain:
            call, coop, pdl = direct, launcher.launch_cooperative_grid, launcher.launch_pdl
        else:  # scratch to allocate, tensor descriptors, another backend: the launcher's own wrapper
            def call(gx, gy, gz, stream, fn, _coop, _pdl, _gs, _ps, *rest):
                launcher(gx, gy, gz, stream, fn, *rest)
            coop = pdl = False
        # constexprs are ignored by the C launcher (already in the kernel); keyword values are in the key
        tail_values = tuple(v for _, v in tail)
        return (call, compiled.function, coop, pdl, compiled.packed_metadata, tail_values, compiled)


def _hooks_installed(kernel) -> bool:
    """Pre-run hooks, or launch hooks (a profiler's): they need Triton's launch metadata. A hook chain
    counts when it holds a hook; a plain function set in its place, always."""
    rt = knobs.runtime
    return bool(kernel.pre_run_hooks or getattr(rt.launch_enter_hook, "calls", rt.launch_enter_hook)
                or getattr(rt.launch_exit_hook, "calls", rt.launch_exit_hook))


def launch(kernel, grid, *args, **kw):
    """``kernel[grid](*args, **kw)``, through the lean path once this specialization has run."""
    lean = getattr(kernel, "_mage_lean", None)
    if lean is None:
        if type(kernel) is not JITFunction:  # the interpreter, an autotuner: Triton's path
            return kernel[grid](*args, **kw)
        lean = kernel._mage_lean = _Lean(kernel)
    if type(grid) is not tuple or not lean.runtime_names.isdisjoint(kw) or _hooks_installed(kernel):
        return kernel[grid](*args, **kw)
    device = _current_device()
    try:
        key = lean.key(device, args, kw)
        hit = lean.entries.get(key)
    except (KeyError, TypeError):  # an argument of another type, an unhashable constexpr
        return kernel[grid](*args, **kw)
    if hit is None:
        return _first(lean, key, grid, args, kw)
    call, function, coop, pdl, packed, tail, compiled = hit
    n = len(grid)
    vals = [a.data_ptr() if type(a) in FACTS_TENSOR else a for a in args]
    call(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, _current_stream(device), function,
         coop, pdl, None, None, packed, None, None, None, *vals, *tail)
    return compiled


def _first(lean: _Lean, key, grid, args, kw):
    """Triton's own launch (it compiles or finds the kernel), then the entry for later calls."""
    compiled = lean.kernel[grid](*args, **kw)
    if compiled is None:
        return None
    try:
        entry = lean.entry(args, kw, compiled)
    except _Unsupported:
        return compiled
    if len(lean.entries) >= _MAX_ENTRIES:
        lean.entries.clear()
    lean.entries[key] = entry
    return compiled


def forget(kernel) -> None:
    """Drop a kernel's lean entries (tests; the next call of each specialization takes Triton's path)."""
    lean = getattr(kernel, "_mage_lean", None)
    if lean is not None:
        lean.entries.clear()
