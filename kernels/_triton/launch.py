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


# The facts of each kind of argument as inline expressions, the cheapest Python can compute them: a
# generated function per pattern of positional types (the pattern is in the key, so a function only
# ever sees the types it was made for).
_EXPR = {
    # a pointer: its dtype and 16-byte alignment; on a CUDA device, since pointers are passed as integers
    "tensor": ("{a}.dtype, {p} & 15 == 0, {a}.is_cuda", "{p}"),
    # Triton makes 1 a constant; any other int is i32, i64 or u64 by its range (past 64 bits it refuses
    # it) and 16-divisible or not (C and Python agree on x % 16 == 0 for negatives too)
    int: ("{a} == 1, {a} & 15 == 0, I32_LO <= {a} < I32_HI, I64_LO <= {a} < U64_LO, U64_LO <= {a} < U64_HI", "{a}"),
    bool: ("{a}", "{a}"),  # Triton: 'u1', not specialised (the value: a finer key, never a wrong one)
    float: ("", "{a}"),  # Triton: 'fp32', not specialised
    type(None): ("", "{a}"),  # Triton: the constant None
    "constexpr": ("{a}", "{a}"),
}


def _facts_function(const: tuple, types: tuple):
    """A function of the positional arguments returning (their facts, flat; their values, pointers
    as integers). KeyError for a type with no facts (the call then takes Triton's path)."""
    facts, vals, pre = [], [], []
    for i, (c, t) in enumerate(zip(const, types)):
        a, p = f"a{i}", f"p{i}"
        kind = "constexpr" if c else ("tensor" if t in FACTS_TENSOR else t)
        fact, val = _EXPR[kind]
        if kind == "tensor":
            pre.append(f"    {p} = {a}.data_ptr()")
        if fact:
            facts.append(fact.format(a=a, p=p))
        vals.append(val.format(a=a, p=p))
    names = ", ".join(f"a{i}" for i in range(len(types)))
    body = "\n".join(pre + [f"    return ({', '.join(facts)},), [{', '.join(vals)}]"])
    scope = dict(I32_LO=I32_LO, I32_HI=I32_HI, I64_LO=I64_LO, U64_LO=U64_LO, U64_HI=U64_HI)
    exec(f"def facts({names}):\n{body}\n", scope)  # noqa: S102 - code built only from the table above
    return scope["facts"]


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
        self.facts: dict = {}  # positional types -> the generated function of their facts

    def key(self, device: int, args: tuple, kw: dict):
        """(the specialization key of a call, its positional values with pointers as integers);
        KeyError for an argument of a type it does not know, TypeError for an unhashable constexpr."""
        types = tuple(map(type, args))
        facts = self.facts.get(types)
        if facts is None:
            facts = self.facts[types] = _facts_function(self.const, types)
        fact, vals = facts(*args)
        return (device, types, fact, tuple(kw.items()), tuple(map(type, kw.values())),
                knobs.runtime.debug, knobs.compilation.instrumentation_mode), vals

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
        key, vals = lean.key(device, args, kw)
        hit = lean.entries.get(key)
    except (KeyError, TypeError):  # an argument of another type, an unhashable constexpr
        return kernel[grid](*args, **kw)
    if hit is None:
        return _first(lean, key, grid, args, kw)
    call, function, coop, pdl, packed, tail, compiled = hit
    n = len(grid)
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
