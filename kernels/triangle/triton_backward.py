"""triangle's backward in Triton. For O_ijc = sum_k A_ikc B_jkc the gradients are two more triangle
contractions, T(X, Y)_pqc = sum_r X_prc Y_qrc, on transposed views:

    dA_ikc = sum_j dO_ijc B_jkc   = T(dO, B^T)_ikc       (X = dO, Y_kjc = B_jkc)
    dB_jkc = sum_i dO_ijc A_ikc   = T(dO^T, A^T)_jkc     (X_jic = dO_ijc, Y_kic = A_ikc)

where ^T swaps the two node axes and keeps c innermost. So the forward's operator
(``mage::triton_triangle``) computes both, at the forward's precision (fp32 or fp32x3) and with the
config its shape chooses, and no transposition is copied: both roads read any strides, and a swap of
the node axes leaves each (node, node) pair's channels contiguous, so the in-place kernel's channel
runs and the channel-major road's transposing copies (which read runs of c) read exactly as many
sectors as for the forward. Each gradient is a forward-sized contraction: the backward is 2x the
forward's FLOPs, with no reduction across programs (each output is one program's sum over its k in
order), so it is deterministic.

Registered with ``torch.library.register_autograd`` (eager and torch.compile) and as the 'triton'
column's training path at both FP32 precisions; the bf16 column is forward only, as the other
operations' bf16 columns are.
"""
from __future__ import annotations

import torch

from kernels._triton.backward import print_row, register_contraction_autograd, time_us, write_rows

from . import triton_kernel  # noqa: F401 - defines mage::triton_triangle (discovery imports alphabetically)

DTYPES = ("fp32", "fp32x3")


def _swap(t: torch.Tensor) -> torch.Tensor:
    """[N, N, C] with its two node axes swapped: a view, c still innermost."""
    return t.transpose(0, 1)


def grad_a(dO, B, dtype: str):
    """dA_ikc = sum_j dO_ijc B_jkc."""
    return torch.ops.mage.triton_triangle(dO, _swap(B), dtype)


def grad_b(dO, A, dtype: str):
    """dB_jkc = sum_i dO_ijc A_ikc."""
    return torch.ops.mage.triton_triangle(_swap(dO), _swap(A), dtype)


# The gradients are looked up at each backward (a test wraps grad_a and grad_b to count the calls).
register_contraction_autograd("triangle", lambda dO, B, dtype: grad_a(dO, B, dtype),
                              lambda dO, A, dtype: grad_b(dO, A, dtype), DTYPES)


# ---- timing for kernels/NOTES.md (GPU only; the harness's pass dimension is the recorded measurement)
def bench(out_dir: str, shapes=(dict(N=128, C=64), dict(N=384, C=128))) -> list:
    """Forward, dA and dB per precision at the field and large shapes, and the same contractions on
    contiguous copies of the transposed views (what the swap costs, if anything); rows printed and
    written to ``out_dir``/triangle_backward.json."""
    from .spec import SPEC
    rows = []
    for shape in shapes:
        for dtype in DTYPES:
            A, B = SPEC.inputs(shape, device="cuda")
            dO = SPEC.inputs(shape, seed=1, device="cuda")[0]
            Bs, dOs, As = (_swap(t).contiguous() for t in (B, dO, A))
            op = torch.ops.mage.triton_triangle
            row = dict(shape, dtype=dtype, forward_us=time_us(lambda: op(A, B, dtype)),
                       dA_us=time_us(lambda: grad_a(dO, B, dtype)), dB_us=time_us(lambda: grad_b(dO, A, dtype)),
                       dA_contiguous_us=time_us(lambda: op(dO, Bs, dtype)),
                       dB_contiguous_us=time_us(lambda: op(dOs, As, dtype)))
            print_row(rows, row)
    return write_rows(out_dir, "triangle_backward", rows)
