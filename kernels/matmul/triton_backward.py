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

import json
import os

import torch

from mage.registry import differentiable

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


def _setup_context(ctx, inputs, output):
    A, B, dtype = inputs
    # each gradient needs only the other operand: keep no tensor a gradient will not read
    ctx.save_for_backward(A if ctx.needs_input_grad[1] else None, B if ctx.needs_input_grad[0] else None)
    ctx.dtype = dtype


def _backward(ctx, dC):
    A, B = ctx.saved_tensors
    dA = grad_a(dC, B, ctx.dtype) if ctx.needs_input_grad[0] else None
    dB = grad_b(A, dC, ctx.dtype) if ctx.needs_input_grad[1] else None
    return dA, dB, None


torch.library.register_autograd("mage::triton_matmul", _backward, setup_context=_setup_context)


def _training_path(dtype: str):
    def matmul_train(A, B):
        return torch.ops.mage.triton_matmul(A, B, dtype)

    matmul_train.__name__ = f"matmul_triton_train_{dtype}"
    return matmul_train


for _dtype in DTYPES:
    differentiable("matmul", "triton", _dtype)(_training_path(_dtype))


# ---- timing for kernels/NOTES.md (GPU only; the harness's pass dimension is the recorded measurement)
def _time_us(fn, reps: int = 20) -> float:
    """Median CUDA-event time of ``fn`` in microseconds, after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


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
            row = dict(n=n, dtype=dtype, forward_us=_time_us(lambda: torch.ops.mage.triton_matmul(A, B, dtype)))
            for copy in (False, True):
                row[f"dA_copy{int(copy)}_us"] = _time_us(lambda: grad_a(dC, B, dtype, copy))
                row[f"dB_copy{int(copy)}_us"] = _time_us(lambda: grad_b(A, dC, dtype, copy))
            row["default"] = COPY[dtype]
            rows.append(row)
            print(json.dumps(row), flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "matmul_backward.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return rows
