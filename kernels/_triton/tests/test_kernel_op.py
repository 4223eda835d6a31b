"""Operators made with ``kernel_op``: torch.compile sees their kernels and launches them from its own
code, with no copy of any input (which it would add if it could not tell what the kernel writes); eager
calls and compiled ones give the same bits, and the function behind an operator, called directly, still
takes the lean launch."""
import pytest
import torch

from kernels._triton import operator as KO
from kernels.layernorm import triton_kernel as LN
from kernels.rope3 import triton_kernel as rope  # registers mage::vjepa2_rope3
from mage.profile import profile
from tests.support.kernel_checks import gpu


def _chain(x, g, b):
    y = torch.ops.mage.triton_layernorm(x, g, b, 1e-6)
    return torch.ops.mage.vjepa2_rope3(y.view(2, 4, 48, 96), 4, 32)


def test_the_interpreter_keeps_the_opaque_operator(monkeypatch):
    # under TRITON_INTERPRET=1 there is no kernel for the compiler to trace: the operator stays a custom_op
    # (and its body the lean launch), which is how every CPU test of the models compiles them
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    made = []
    monkeypatch.setattr(torch.library, "custom_op", lambda name, fn, mutates_args: made.append(name) or _Op())
    KO.kernel_op("mage::probe_only", lambda x: x)(lambda x: x)
    assert made == ["mage::probe_only"]


class _Op:
    def register_fake(self, fn):
        self.fake = fn


@gpu
def test_a_compiled_graph_launches_the_kernels_itself_and_copies_nothing():
    torch.manual_seed(0)
    x = torch.randn(384, 96, device="cuda", dtype=torch.bfloat16)
    g, b = torch.randn(96, device="cuda", dtype=x.dtype), torch.randn(96, device="cuda", dtype=x.dtype)
    eager = _chain(x, g, b)
    compiled = torch.compile(_chain, fullgraph=True)
    with torch.no_grad():
        got = compiled(x, g, b)
    # the same two kernels, though Inductor compiles them with its own options (its first H100 run differed
    # from the eager launch in a few bits): within a bf16 rounding or two of each other
    torch.testing.assert_close(got, eager, rtol=2e-2, atol=2e-2 * eager.abs().max().item())
    p = profile(lambda: compiled(x, g, b), iters=5)
    assert p.launches == 2, p.kernel_names  # the LayerNorm and the rotation, no clone of an input
    assert p.copy_us == 0


def _runtime_names(kernel) -> set:
    """The kernel's parameters that are not constexprs (the lean launch takes these only by position)."""
    import inspect
    return {n for n, p in inspect.signature(kernel.fn).parameters.items() if "constexpr" not in str(p.annotation)}


@pytest.mark.skipif(not (torch.cuda.is_available() or KO.common.interpreting()), reason="needs CUDA or the interpreter")
def test_eager_calls_pass_no_runtime_argument_by_keyword(monkeypatch):
    # a runtime argument by keyword sends the lean launch to Triton's slower path; the statistics' pointers
    # the traced call needs were passed on every eager call for a while (a review found it, no test had)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(8, 96, device=dev)
    g, b = torch.ones(96, device=dev), torch.zeros(96, device=dev)
    seen = []
    real = KO.common.launch
    monkeypatch.setattr(KO.common, "launch", lambda k, grid, *a, **kw: seen.append((k, kw)) or real(k, grid, *a, **kw))
    LN.layernorm(x, g, b)
    torch.ops.mage.triton_layernorm(x, g, b)
    rope.rope3(torch.randn(1, 2, 16, 96, device=dev), 4, 32)
    assert len(seen) == 3
    for kernel, kw in seen:
        assert _runtime_names(kernel).isdisjoint(kw), sorted(_runtime_names(kernel) & set(kw))


@gpu
def test_the_function_called_directly_takes_the_lean_launch():
    x = torch.randn(64, 96, device="cuda")
    g, b = torch.ones(96, device="cuda"), torch.zeros(96, device="cuda")
    LN.layernorm(x, g, b)
    LN.layernorm(x, g, b)
    assert LN._layernorm_kernel._mage_lean.entries  # the second call found its entry: the lean launch ran


@gpu
def test_the_operator_passes_opcheck_as_a_triton_op():
    # fake tensors, the dispatcher's schema, and torch.compile's dispatch with dynamic shapes (where the
    # traced body chooses its tiles with symbolic sizes)
    x = torch.randn(40, 96, device="cuda")
    g, b = torch.randn(96, device="cuda"), torch.randn(96, device="cuda")
    torch.library.opcheck(torch.ops.mage.triton_layernorm.default, (x, g, b, 1e-6))


@gpu
def test_a_compiled_graph_trains_through_the_layernorm():
    x = torch.randn(48, 96, device="cuda", requires_grad=True)
    g = torch.randn(96, device="cuda", requires_grad=True)
    b = torch.randn(96, device="cuda", requires_grad=True)

    def f(x, g, b):
        return (torch.ops.mage.triton_layernorm(x, g, b) ** 2).sum()

    want = torch.autograd.grad(f(x, g, b), (x, g, b))
    got = torch.autograd.grad(torch.compile(f)(x, g, b), (x, g, b))
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-4)
