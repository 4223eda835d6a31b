"""A model's own eps reaches the kernel (V-JEPA 2 normalises with 1e-6, the spec with 1e-5): forward and
both backward roads against float64 on the interpreter, and a bad eps refused by name."""
import pytest
import torch
import torch.nn.functional as F

from mage.errors import MageInputError

from kernels.layernorm.spec import EPS
from kernels.layernorm import triton_backward  # noqa: F401 - registers the operators' autograd

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or __import__("os").environ.get("TRITON_INTERPRET") == "1"),
                                reason="the Triton kernel needs CUDA or TRITON_INTERPRET=1")


def _inputs(R=7, C=37, scale=1e-3):
    gen = torch.Generator().manual_seed(5)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    # rows of small spread: there eps is a visible part of the variance, so a lost eps fails the check
    x = (torch.randn(R, C, generator=gen) * scale).to(dev).requires_grad_()
    g = torch.randn(C, generator=gen).to(dev).requires_grad_()
    b = torch.randn(C, generator=gen).to(dev).requires_grad_()
    return x, g, b


@pytest.mark.parametrize("eps", [1e-6, EPS, 1e-2])
@pytest.mark.parametrize("op", ["triton_layernorm", "triton_layernorm_train"])
def test_the_eps_passed_is_the_eps_used(eps, op):
    x, g, b = _inputs()
    y = getattr(torch.ops.mage, op)(x, g, b, eps)
    y = y[0] if isinstance(y, tuple) else y
    xd, gd, bd = (t.detach().double().requires_grad_() for t in (x, g, b))
    ref = F.layer_norm(xd, (x.shape[1],), gd, bd, eps)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    dy = torch.randn_like(ref)
    y.backward(dy.float())
    ref.backward(dy)
    for got, want in ((x.grad, xd.grad), (g.grad, gd.grad), (b.grad, bd.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_another_eps_gives_another_answer():
    """The guard of the test above: at this spread the spec's eps and V-JEPA 2's differ visibly."""
    x, g, b = _inputs()
    a = torch.ops.mage.triton_layernorm(x, g, b, 1e-6)
    c = torch.ops.mage.triton_layernorm(x, g, b, EPS)
    assert (a - c).abs().max() > 1e-2


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan"), float("inf")])
def test_a_bad_eps_is_refused_by_name(eps):
    x, g, b = _inputs()
    with pytest.raises(MageInputError, match="layernorm.*eps"):
        torch.ops.mage.triton_layernorm(x, g, b, eps)
