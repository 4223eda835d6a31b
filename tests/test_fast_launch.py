"""The lean launch (kernels/_triton/launch.py): its key is never coarser than Triton's own, a hit passes
the compiled launcher exactly the arguments Triton would, anything it cannot describe takes Triton's
path, and on a GPU it gives the bits of the normal path across specialisations."""
from __future__ import annotations

import itertools

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import JITFunction, create_function_from_signature

from kernels._triton import common, launch as L
from tests.support.kernel_checks import cpu_only, gpu
from mage import ops, registry


def _copy(X, Y, n, scale, BLOCK: tl.constexpr, FLAG: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m) * scale + FLAG, mask=m)


def _jit(fn=_copy) -> JITFunction:
    return JITFunction(fn)  # a JITFunction even under the interpreter (triton.jit would not give one)


def _triton_key(kernel, args, kw):
    """Triton 3.6's own cache key of a call: its binder's specialization and options."""
    binder = create_function_from_signature(kernel.signature, kernel.params, CUDABackend)
    _, spec, options = binder(*args, **kw)
    return str(spec) + str(options)


def _calls():
    x = torch.zeros(64, dtype=torch.float32)
    tensors = [x, x[1:], x[4:], x[2:].view(torch.bfloat16), x.view(torch.int32), x[4:].view(torch.float16)]
    ints = [0, 1, 2, 16, 17, 32, -16, -1, 2**31 - 16, 2**31, 2**31 + 16, 2**62, 2**63, 2**63 + 16, -2**31,
            -2**31 - 16]
    scales = [1.0, 0.5, 2, 1, True]
    blocks = [16, 32, 1]
    kws = [{}, dict(num_warps=4), dict(num_warps=8), dict(FLAG=1), dict(FLAG=True), dict(num_stages=2)]
    for X, n, s, b, kw in itertools.product(tensors[:4], ints, scales, blocks, kws[:3]):
        yield (X, x, n, s, b), kw
    for X, Y, kw in itertools.product(tensors, tensors, kws):
        yield (X, Y, 16, 1.0, 32), kw


def test_key_is_never_coarser_than_tritons():
    """Calls sharing a lean key share Triton's key: a call that would compile differently never finds
    another's kernel (misaligned views, dtypes, ints around 1, 16 and the i32/i64/u64 bounds, constexpr
    values and types, launch options)."""
    k = _jit()
    lean = L._Lean(k)
    seen: dict = {}
    n = 0
    for args, kw in _calls():
        ours, _ = lean.key(0, args, kw)
        theirs = _triton_key(k, args, kw)
        assert seen.setdefault(ours, theirs) == theirs, (args, kw)
        n += 1
    assert len(seen) > 50 and n > len(seen)  # many distinct specialisations, and shared keys checked


def test_facts_of_ints_and_tensors():
    facts = L._facts_function((False, False), (int, torch.Tensor))
    x = torch.zeros(8)

    def f(n, t):
        return facts(n, t)[0]
    assert f(1, x) != f(17, x) and f(16, x) != f(17, x) and f(16, x) != f(2**31, x) != f(2**63, x)
    assert f(2**63 + 16, x) != f(2**64 + 16, x) and f(16, x) != f(16, x[1:]) and f(16, x) != f(16, x.double())
    assert facts(16, x)[1] == [16, x.data_ptr()]  # the values the launcher gets: pointers as integers


class _Launcher:  # stands in for Triton's CudaLauncher: the lean path calls its C ``launch`` directly
    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid = launch_pdl = False

    def __init__(self):
        self.calls = []

    def launch(self, *a):
        self.calls.append(a)


_Launcher.__name__ = "CudaLauncher"


class _Compiled:
    function, packed_metadata = 1234, (4, 1, 0)

    def __init__(self):
        self.run = _Launcher()


@pytest.fixture
def fake(monkeypatch):
    """A JITFunction whose Triton path is recorded and returns a fake compiled kernel; device 0, stream 7."""
    k = _jit()
    slow = []
    compiled = {}

    def run(*args, grid, warmup, **kw):
        slow.append((args, grid, kw))
        key = _triton_key(k, args, kw)
        return compiled.setdefault(key, _Compiled())

    monkeypatch.setattr(k, "run", run, raising=False)
    monkeypatch.setattr(L, "_current_device", lambda: 0)
    monkeypatch.setattr(L, "_current_stream", lambda d: 7)
    return k, slow, compiled


def test_a_hit_passes_the_launcher_what_triton_would(fake):
    k, slow, compiled = fake
    x, y = torch.zeros(64), torch.zeros(64)
    got = L.launch(k, (3,), x, y, 48, 0.5, BLOCK=16, num_warps=4)
    assert len(slow) == 1 and got is next(iter(compiled.values()))
    got2 = L.launch(k, (3,), x, y, 48, 0.25, BLOCK=16, num_warps=4)  # a float is not specialised: a hit
    assert len(slow) == 1 and got2 is got
    (call,) = got.run.calls
    # grid padded to three, stream, handle, no scratch, metadata, no launch metadata or hooks, then every
    # parameter in order: pointers as integers, runtime values, the constexprs (default FLAG=0)
    assert call == (3, 1, 1, 7, 1234, False, False, None, None, (4, 1, 0), None, None, None,
                    x.data_ptr(), y.data_ptr(), 48, 0.25, 16, 0)


@pytest.mark.parametrize("change", [
    lambda x, y: ((x[1:], y, 48, 0.5), dict(BLOCK=16)),  # a misaligned pointer
    lambda x, y: ((x, y, 47, 0.5), dict(BLOCK=16)),  # an int that is no longer a multiple of 16
    lambda x, y: ((x, y, 1, 0.5), dict(BLOCK=16)),  # an int that becomes the constant 1
    lambda x, y: ((x, y, 2**31 + 16, 0.5), dict(BLOCK=16)),  # an int past i32
    lambda x, y: ((x.double(), y, 48, 0.5), dict(BLOCK=16)),  # another dtype
    lambda x, y: ((x, y, 48, 0.5), dict(BLOCK=32)),  # another constexpr
    lambda x, y: ((x, y, 48, 0.5), dict(BLOCK=16, FLAG=True)),  # a constexpr of another type
    lambda x, y: ((x, y, 48, 0.5), dict(BLOCK=16, num_warps=8)),  # another launch option
    lambda x, y: ((x, y, 48, 1), dict(BLOCK=16)),  # an int where a float was
])
def test_every_specialisation_change_misses(fake, change):
    k, slow, compiled = fake
    x, y = torch.zeros(64), torch.zeros(64)
    L.launch(k, (3,), x, y, 48, 0.5, BLOCK=16)
    args, kw = change(x, y)
    L.launch(k, (3,), *args, **kw)
    assert len(slow) == 2  # the changed call went through Triton (which compiles it on its own key)
    hit = L.launch(k, (3,), *args, **kw)
    assert len(slow) == 2  # and is a hit from then on, on the kernel Triton chose for it
    assert hit is compiled[_triton_key(k, args, kw)] and len(compiled) == 2


def test_what_it_cannot_describe_takes_tritons_path(fake, monkeypatch):
    k, slow, _ = fake
    x, y = torch.zeros(64), torch.zeros(64)
    cases = [
        lambda: L.launch(k, lambda meta: (3,), x, y, 48, 0.5, BLOCK=16),  # a callable grid
        lambda: L.launch(k, (3,), x, y, 48, 0.5, BLOCK=[16]),  # an unhashable constexpr
        lambda: L.launch(k, (3,), x, y, n=48, scale=0.5, BLOCK=16),  # runtime arguments by keyword
        lambda: L.launch(k, (3,), x, y, tl.constexpr(48), 0.5, BLOCK=16),  # an argument of a type it does not know
    ]
    for i, case in enumerate(cases):
        for _ in range(2):
            case()
        assert len(slow) == 2 * (i + 1)
    # a launch hook (a profiler's) needs Triton's launch metadata: every call takes Triton's path
    L.launch(k, (3,), x, y, 48, 0.5, BLOCK=16)
    L.launch(k, (3,), x, y, 48, 0.5, BLOCK=16)
    before = len(slow)
    from triton import knobs
    monkeypatch.setattr(knobs.runtime.launch_enter_hook, "calls", [lambda m: None])
    L.launch(k, (3,), x, y, 48, 0.5, BLOCK=16)
    assert len(slow) == before + 1


def test_interpreted_kernels_take_tritons_path():
    """Under TRITON_INTERPRET=1 ``triton.jit`` gives no JITFunction: the launch is the plain one."""
    class Interpreted:
        def __init__(self):
            self.calls = []

        def __getitem__(self, grid):
            return lambda *a, **kw: self.calls.append((grid, a, kw)) or "ran"

    k = Interpreted()
    assert L.launch(k, (2,), 1, 2, B=3) == "ran" and k.calls == [((2,), (1, 2), dict(B=3))]


@cpu_only
def test_interpreter_results_through_the_launch():
    k = triton.jit(_copy)
    x, y, z = torch.randn(50), torch.full((50,), float("nan")), torch.full((50,), float("nan"))
    L.launch(k, (4,), x, y, 50, 2.0, BLOCK=16)
    k[(4,)](x, z, 50, 2.0, BLOCK=16)
    assert torch.equal(y, z) and torch.equal(y, x * 2)


def _plain(kernel, grid, *args, **kw):
    return kernel[grid](*args, **kw)


@gpu
def test_gpu_lean_and_plain_give_the_same_bits_across_specialisations():
    """A copy kernel run first aligned, then on misaligned views, odd lengths, n == 1, another dtype
    and other constexprs: each through the lean path (twice: the second a hit) and through Triton's,
    bit for bit. A kernel reused across an alignment change would fault or read the wrong bytes."""
    k = triton.jit(_copy)
    base = torch.randn(4200, device="cuda")
    for off, n, dtype, block, warps in itertools.product((0, 1, 3, 4), (4096, 4095, 1, 17), (torch.float32, torch.float16),
                                                       (128, 1024), (4, 8)):
        x = base.to(dtype)[off:off + n]
        outs = []
        for fn in (L.launch, L.launch, _plain):
            y = torch.full((n + 1,), float("nan"), device="cuda", dtype=dtype)[1:]  # misaligned output too
            fn(k, (triton.cdiv(n, block),), x, y, n, 2.0, BLOCK=block, num_warps=warps)
            outs.append(y)
        torch.cuda.synchronize()
        assert all(torch.equal(outs[0], o) for o in outs[1:]) and torch.equal(outs[0], x * 2), (off, n, dtype)
    assert len(k._mage_lean.entries) > 8


@gpu
@pytest.mark.parametrize("impl", registry.impls(names=["triton"]), ids=lambda i: f"{i.op}-{i.dtype}")
def test_gpu_operations_lean_equals_plain(impl, monkeypatch):
    """Every Triton column at its awkward shapes: the lean launch (first call and hits) gives the bits
    of Triton's own launch."""
    spec = ops.OPS[impl.op]
    for shape in spec.awkward[:6]:
        inputs = spec.inputs(shape, seed=2, device="cuda", dtype=impl.dtype, dist="heavy")
        inputs = impl.prepare(*inputs) if impl.prepare else inputs
        lean = [impl.fn(*inputs) for _ in range(2)]
        monkeypatch.setattr(common, "launch", _plain)
        plain = impl.fn(*inputs)
        monkeypatch.undo()
        for y in lean:
            assert torch.equal(torch.nan_to_num(y, 7.0), torch.nan_to_num(plain, 7.0)), (impl.key, shape)


@gpu
def test_gpu_lean_launch_costs_less_host_time():
    import time
    k = triton.jit(_copy)
    x, y = torch.randn(4096, device="cuda"), torch.empty(4096, device="cuda")

    def per_call(fn):
        for _ in range(20):
            fn(k, (4,), x, y, 4096, 2.0, BLOCK=1024)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn(k, (4,), x, y, 4096, 2.0, BLOCK=1024)
        t = time.perf_counter() - t0
        torch.cuda.synchronize()
        return t

    lean, plain = min(per_call(L.launch) for _ in range(5)), min(per_call(_plain) for _ in range(5))
    assert lean < plain, (lean, plain)

