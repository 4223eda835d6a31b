"""The LayerNorm as the operator a model calls (what torch.compile sees of it)."""
import torch
from kernels.layernorm import triton_kernel  # noqa: F401 - registers the operator


def test_the_operators_fake_promises_the_layout_the_kernel_returns():
    """A transposed input (as a model hands one over) gets a contiguous output from the kernel; the fake
    kernel must promise that layout, or torch.compile's graph asserts on the strides (seen on the GPU in
    V-JEPA 2's encoder with the LayerNorm swapped in)."""
    x = torch.randn(24, 16).t()  # [16, 24], strides (1, 16)
    g, b = torch.randn(24), torch.randn(24)
    torch.library.opcheck(torch.ops.mage.triton_layernorm.default, (x, g, b), test_utils=("test_faketensor",))


def test_the_linear_operator_swapped_beside_it_keeps_its_promise_too():
    from kernels.matmul import triton_epilogue  # noqa: F401 - registers mage::triton_linear
    x = torch.randn(12, 8).t()  # [8, 12], strides (1, 8)
    W, b = torch.randn(5, 12), torch.randn(5)
    torch.library.opcheck(torch.ops.mage.triton_linear.default, (x, W, b, True), test_utils=("test_faketensor",))
