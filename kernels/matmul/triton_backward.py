"""matmul's backward in Triton: for C = A B, dA = dC B^T and dB = A^T dC, each computed by the forward's
own kernel (``mage::triton_matmul``) on transposed views, at the forward's precision (an fp32x3
forward gets fp32x3 gradients, bf16 gets bf16 ones). Registered with ``torch.library.register_autograd``
so the operator is differentiable eagerly and inside torch.compile (the backward graph calls the same
opaque operator), and as the 'triton' column's training path for every precision.

What the transposed views cost. The launcher reads any strides, so no transposition needs a copy;
whether one pays depends on which index is contiguous where the tensor cores read it:
- dA = dC B^T: dC [M, N] is read with the reduction index (N) contiguous, K-major, and B^T [N, K] is
  a view whose reduction index is contiguous too: both operands are K-major, as TF32 wgmma wants.
- dB = A^T dC: A^T [K, M] is read with M, the reduction index, strided: an M-major left operand,
  which TF32 wgmma cannot read from shared memory either; and dC [M, N] is an N-major right operand,
  which the launcher's ``B_KMAJOR`` copy (the tensor-core defaults) already turns K-major.
So per precision and gradient, ``COPY`` says whether the transposed operand is first made contiguous
(one PyTorch copy launch, counted in the backward's time): A^T for dB where the tensor cores would
otherwise stage it 4 bytes at a time (TF32, fp32x3); B^T for dA at bf16, whose kernel was slower
reading B K-major than N-major (kernels/NOTES.md, "matmul: fp32x3, and B's layout"), and at fp32, whose
FMA dot reads k-innermost operands with 4-byte shared loads (the triangle's channel-major road paid for
that, "triangle: what the layout costs"; an M-major A^T is the layout it likes).
These are predictions; ``bench`` times both ways and kernels/NOTES.md ("Backward") records the choice.
"""
from __future__ import annotations

import torch

from kernels._triton.backward import print_row, register_contraction_autograd, time_us, write_rows

from . import triton_kernel  # noqa: F401 - defines mage::triton_matmul (discovery imports alphabetically)

DTYPES = ("fp32", "fp32x3", "tf32", "bf16")
# Per precision: copy B^T before dA (the 'dA' key), copy A^T before dB (the 'dB' key).
COPY = {
    "fp32": {"dA": True, "dB": False},
    "fp32x3": {"dA": False, "dB": True},
    "tf32": {"dA": False, "dB": True},
    "bf16": {"dA": True, "dB": False},  # 16-bit wgmma reads an M-major A from shared memory itself
}


def _operand(view: torch.Tensor, copy: bool) -> torch.Tensor:
    return view.contiguous() if copy else view


def grad_a(dC, B, dtype: str, copy=None):
    """dA = dC B^T, by the forward's operator."""
    copy = COPY[dtype]["dA"] if copy is None else copy
    return torch.ops.mage.triton_matmul(dC, _operand(B.t(), copy), dtype)


def grad_b(A, dC, dtype: str, copy=None):
    """dB = A^T dC, by the forward's operator."""
    copy = COPY[dtype]["dB"] if copy is None else copy
    return torch.ops.mage.triton_matmul(_operand(A.t(), copy), dC, dtype)


# The gradients are looked up at each backward (a test wraps grad_a and grad_b to count the calls);
# grad_b takes A first (the order of the product A^T dC), the shared registration passes dC first.
register_contraction_autograd("matmul", lambda dC, B, dtype: grad_a(dC, B, dtype),
                              lambda dC, A, dtype: grad_b(A, dC, dtype), DTYPES)


# ---- timing for kernels/NOTES.md (GPU only; the harness's pass dimension is the recorded measurement)
def bench(out_dir: str, sizes=(1024, 4096)) -> list:
    """Forward, dA and dB (each with and without its operand copy) per precision at n^3; rows printed
    and written to ``out_dir``/matmul_backward.json."""
    from .spec import SPEC
    rows = []
    for n in sizes:
        shape = dict(M=n, K=n, N=n)
        for dtype in DTYPES:
            A, B = SPEC.inputs(shape, device="cuda", dtype=dtype)
            dC = SPEC.inputs(dict(M=n, K=n, N=n), seed=1, device="cuda", dtype=dtype)[0]
            row = dict(n=n, dtype=dtype, forward_us=time_us(lambda: torch.ops.mage.triton_matmul(A, B, dtype)))
            for copy in (False, True):
                row[f"dA_copy{int(copy)}_us"] = time_us(lambda: grad_a(dC, B, dtype, copy))
                row[f"dB_copy{int(copy)}_us"] = time_us(lambda: grad_b(A, dC, dtype, copy))
            row["default"] = COPY[dtype]
            print_row(rows, row)
    return write_rows(out_dir, "matmul_backward", rows)
