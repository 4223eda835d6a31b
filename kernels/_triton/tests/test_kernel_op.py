"""Operators made with ``kernel_op``: torch.compile sees their kernels and launches them from its own
code, with no copy of any input (which it would add if it could not tell what the kernel writes); eager
calls and compiled ones give the same bits, and the function behind an operator, called directly, still
takes the lean launch."""
import pytest
import torch

from kernels._triton import operator as KO
from kernels.layernorm import triton_kernel as LN
from mage.ext.models import rope  # noqa: F401 - registers mage::vjepa2_rope3
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


@gpu
def test_the_function_called_directly_takes_the_lean_launch(monkeypatch):
    x = torch.randn(64, 96, device="cuda")
    g, b = torch.ones(96, device="cuda"), torch.zeros(96, device="cuda")
    seen = []
    real = KO.common.launch
    monkeypatch.setattr(KO.common, "launch", lambda k, grid, *a, **kw: seen.append(k) or real(k, grid, *a, **kw))
    LN.layernorm(x, g, b)
    torch.ops.mage.triton_layernorm(x, g, b)
    assert len(seen) == 2
