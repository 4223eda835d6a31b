"""What the Triton backward passes of the two-operand contractions share (matmul, triangle): each is an
operator ``mage::triton_<op>(A, B, dtype)`` whose gradients are two more calls of the same operator on
views, so its autograd registration, its training paths and its timing scaffolding are the same code.
"""
from __future__ import annotations

import json
import os

import torch

from mage.registry import declare


def register_contraction_autograd(op: str, grad_a, grad_b, dtypes) -> None:
    """Make ``mage::triton_<op>(A, B, dtype)`` differentiable in A and B (eagerly and inside
    torch.compile) and register it as the 'triton' column's training path at each of ``dtypes``.

    ``grad_a(dOut, B, dtype)`` -> dA and ``grad_b(dOut, A, dtype)`` -> dB: each gradient reads the
    incoming gradient and the other operand only."""
    operator = getattr(torch.ops.mage, f"triton_{op}")

    def setup_context(ctx, inputs, output):
        A, B, dtype = inputs
        # each gradient needs only the other operand: keep no tensor a gradient will not read
        ctx.save_for_backward(A if ctx.needs_input_grad[1] else None, B if ctx.needs_input_grad[0] else None)
        ctx.dtype = dtype

    def backward(ctx, dout):
        A, B = ctx.saved_tensors
        dA = grad_a(dout, B, ctx.dtype) if ctx.needs_input_grad[0] else None
        dB = grad_b(dout, A, ctx.dtype) if ctx.needs_input_grad[1] else None
        return dA, dB, None  # the precision is not differentiable

    torch.library.register_autograd(f"mage::triton_{op}", backward, setup_context=setup_context)
    for dtype in dtypes:
        declare("train", op, "triton", dtype)(_training_path(op, operator, dtype))


def _training_path(op: str, operator, dtype: str):
    def train(A, B):
        return operator(A, B, dtype)

    train.__name__ = f"{op}_triton_train_{dtype}"
    return train


# ---- timing for kernels/NOTES.md (GPU only; the harness's pass dimension is the recorded measurement)
def time_us(fn, reps: int = 20) -> float:
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


def print_row(rows: list, row: dict) -> None:
    """Keep one bench row and print it as it comes (a run cut short still shows its rows)."""
    rows.append(row)
    print(json.dumps(row), flush=True)


def write_rows(out_dir: str, name: str, rows: list) -> list:
    """Write a bench's rows to ``out_dir``/``name``.json and return them."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return rows
