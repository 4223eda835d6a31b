"""bias_gelu's backward in Triton: dx = dy * gelu'(x + b) and db = the column sums of dx, with
gelu'(z) = Phi(z) + z phi(z) for the exact erf GELU.

One pass reads x and dy once and writes dx once; each program also sums its dx tile's columns over its
rows into a [row_blocks, C] buffer of partial sums. A second small kernel (kernels/_triton/reduce.py)
adds those partials, row block by row block, in order: db is the same bits on every run (no atomics,
whose order the scheduler picks).

Precisions: FP32, and bf16 storage (the model blocks' bf16 rows, which the forward kernel serves too): a
bf16 x, b and dy are read as bf16 and widened in registers, every sum is FP32 (the partials too), and dx
and db are rounded once, at their stores, to the inputs' dtype (autograd hands a gradient back in its
input's dtype; a bf16 copy of FP32 master weights passes db on to them through its cast's backward).

Makes ``mage::triton_bias_gelu`` differentiable (eagerly and inside torch.compile) and registers it as
the Triton column's training path.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError
from mage.registry import declare

from kernels._triton import common, reduce

from .spec import SPEC  # its validate: the launcher's checks, bf16 rows included
from .triton_kernel import bias_gelu_op  # the operator this module makes differentiable

OP = "bias_gelu"


# <kernel>
@triton.jit
def _bias_gelu_bwd_kernel(
    X, Bias, DY, DX, Part,  # x [R, C], b [C], dy [R, C], dx [R, C], partial column sums [row_blocks, C]
    R, C,  # rows and columns
    stride_x, stride_dy, stride_dx,  # row strides (columns are contiguous)
    ROWS: tl.constexpr,  # rows per program (a multiple of BLOCK_R): one row of Part per program
    BLOCK_R: tl.constexpr,  # rows per step
    BLOCK_C: tl.constexpr,  # columns per program
):
    tile_r, tile_c = tl.program_id(0), tl.program_id(1)
    cols = tile_c * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    b = tl.load(Bias + cols, mask=cmask, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for r0 in range(0, ROWS, BLOCK_R):  # a fixed order: the partial sum is the same bits every run
        row = tile_r * ROWS + r0 + tl.arange(0, BLOCK_R)
        mask = (row < R)[:, None] & cmask[None, :]
        row64 = row.to(tl.int64)[:, None]  # R * C can pass 2^31 elements
        # bf16 storage widened here (no-ops for FP32); dx is rounded to DX's dtype by the store
        x = tl.load(X + row64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        z = x + b[None, :]
        cdf = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476))  # Phi(z)
        pdf = 0.3989422804014327 * tl.exp(-0.5 * z * z)  # phi(z) = exp(-z^2 / 2) / sqrt(2 pi)
        dx = dy * (cdf + z * pdf)
        tl.store(DX + row64 * stride_dx + cols[None, :], dx, mask=mask)
        # db sums the FP32 dx, not the bf16 value stored: one rounding of db, at its own store
        acc += tl.sum(tl.where(mask, dx, 0.0), axis=0)
    tl.store(Part + tile_r.to(tl.int64) * C + cols, acc, mask=cmask)
# </kernel>


# ROWS bounds the partials: R / ROWS x C values written and read again (1% of the compulsory bytes at
# ROWS = 64); fewer rows a program where 64 would leave fewer than PROGRAMS programs (the field shape:
# 2048 rows of 512 columns would be 32 programs on 132 SMs). BLOCK_R x BLOCK_C is the tile in
# registers (x, dy and dx: 3 x 16 values a thread at 4 warps).
CONFIG = dict(ROWS=None, BLOCK_R=4, BLOCK_C=512, num_warps=4)
MAX_ROWS, PROGRAMS = 64, 1024


def check_grad(op, name, g, like) -> torch.Tensor:
    """A gradient handed to a backward: a tensor of ``like``'s dtype (float32 or bfloat16) and shape, on
    its device (a bf16 output's gradient is bf16: autograd hands it back in the output's dtype)."""
    ops.tensor(op, name, g, (like.dtype,))
    if tuple(g.shape) != tuple(like.shape):
        raise MageInputError(op, name, f"must have the output's shape {tuple(like.shape)}, got {tuple(g.shape)}")
    ops.same_device(op, {"x": like, name: g})
    return g


def _check_args(x, b, dy):
    """The forward's checks (FP32, or bf16 x with bf16 b), then dy's."""
    SPEC.validate(x, b)
    check_grad(OP, "dy", dy, x)


def bias_gelu_backward(x, b, dy, **config):
    """(dx, db) of y = gelu(x + b) for the incoming gradient dy; deterministic."""
    _check_args(x, b, dy)
    common.on_device(OP, {"x": x, "b": b, "dy": dy})
    R, C = x.shape
    dx = torch.empty((R, C), dtype=x.dtype, device=x.device)
    db = torch.zeros((C,), dtype=b.dtype, device=x.device)
    if R == 0 or C == 0:
        return dx, db
    x = x if x.stride(1) == 1 else x.contiguous()
    dy = dy if dy.stride(1) == 1 else dy.contiguous()  # a broadcast gradient (stride 0 rows) is read as is
    consts, launch = common.split({**CONFIG, **config})
    if consts["ROWS"] is None:  # the largest power of two <= MAX_ROWS that still makes PROGRAMS programs
        want_rows = max(1, R * common.cdiv(C, consts["BLOCK_C"]) // PROGRAMS)
        consts["ROWS"] = max(consts["BLOCK_R"], min(MAX_ROWS, 1 << (want_rows.bit_length() - 1)))
    if consts["ROWS"] % consts["BLOCK_R"]:
        raise MageInputError(OP, "config", f"ROWS={consts['ROWS']} must be a multiple of BLOCK_R={consts['BLOCK_R']}")
    row_blocks = common.cdiv(R, consts["ROWS"])
    part = torch.empty((row_blocks, C), dtype=torch.float32, device=x.device)  # FP32 at any precision
    _bias_gelu_bwd_kernel[(row_blocks, common.cdiv(C, consts["BLOCK_C"]))](
        x, b.contiguous(), dy, dx, part, R, C, x.stride(0), dy.stride(0), dx.stride(0), **consts, **launch)
    reduce.column_sum(part, db)  # FP32 sums, rounded once by the store where db is bf16
    return dx, db


@torch.library.custom_op("mage::triton_bias_gelu_backward", mutates_args=())
def bias_gelu_backward_op(x: torch.Tensor, b: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward as an operator, so a compiled graph's backward can call it."""
    return bias_gelu_backward(x, b, dy)


@bias_gelu_backward_op.register_fake
def _(x, b, dy):
    _check_args(x, b, dy)  # the launcher's checks: bf16 passes here as it does there
    return torch.empty_like(x), torch.empty_like(b)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy):
    x, b = ctx.saved_tensors
    dx, db = torch.ops.mage.triton_bias_gelu_backward(x, b, dy)
    return (dx if ctx.needs_input_grad[0] else None), (db if ctx.needs_input_grad[1] else None)


torch.library.register_autograd("mage::triton_bias_gelu", _backward, setup_context=_setup_context)


@declare("train", OP, "triton")
def train(x, b):
    """The Triton column's training path: the operator, differentiable in x and b."""
    return bias_gelu_op(x, b)
