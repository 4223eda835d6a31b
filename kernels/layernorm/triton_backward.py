"""layernorm's backward in Triton, from the forward's saved mean and 1 / sqrt(var + eps) of each row.

With xhat = (x - mean) rstd and g = dy gamma (C columns a row):
    dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)),   dgamma = sum_r dy xhat,   dbeta = sum_r dy.
One pass reads x and dy once and writes dx (a row longer than one block is read twice, the second time
from L2). dgamma and dbeta are column sums over rows: each program adds its ROWS rows into registers in
row order and writes one row of partial sums; a second small kernel (kernels/_triton/reduce.py) adds the
partials in order. Both are the same bits on every run (no atomics).

Precisions: FP32, and bf16 storage (the model blocks' bf16 rows, which the forward kernel serves too):
a bf16 x, gamma and dy are read as bf16 and widened in registers; the saved statistics stay FP32 (the
forward computes them in FP32 from the bf16 row); every sum is FP32 (the partials too); dx, dgamma and
dbeta are rounded once, at their stores, to the inputs' dtype (autograd hands a gradient back in its
input's dtype; a bf16 copy of FP32 master weights passes it on to them through its cast's backward).

Adds the training operator ``mage::triton_layernorm_train`` (y with the saved statistics, one launch of
the forward kernel with STATS) and makes it and ``mage::triton_layernorm`` differentiable; registers the
training path.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError
from mage.registry import declare

from kernels._triton import common, reduce

from .spec import EPS, SPEC  # its validate: the launcher's checks, bf16 rows included
from .triton_kernel import check_eps, layernorm, layernorm_op  # the operator this module makes differentiable

OP = "layernorm"


# <kernel>
@triton.jit
def _layernorm_bwd_kernel(
    X, Gamma, Mean, Rstd, DY, DX,  # x [R, C], gamma [C], the saved statistics [R], dy [R, C], dx [R, C]
    PartG, PartB,  # partial sums of dgamma and dbeta [programs, C] (zeroed when not ONE_BLOCK)
    R, C, stride_x, stride_dy, stride_dx,
    ROWS: tl.constexpr,  # rows per program (a multiple of BLOCK_R): one row of partials per program
    BLOCK_R: tl.constexpr,  # rows per step
    BLOCK_C: tl.constexpr,  # columns per chunk
    ONE_BLOCK: tl.constexpr,  # BLOCK_C >= C: a row is one chunk, in registers
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)
    part = pid.to(tl.int64) * C
    if ONE_BLOCK:
        cmask = cols < C
        gamma = tl.load(Gamma + cols, mask=cmask, other=0.0).to(tl.float32)
        dg = tl.zeros((BLOCK_C,), dtype=tl.float32)
        db = tl.zeros((BLOCK_C,), dtype=tl.float32)
        for r0 in range(0, ROWS, BLOCK_R):  # rows in order: the partial sums are the same bits every run
            row = pid * ROWS + r0 + tl.arange(0, BLOCK_R)
            rmask = row < R
            mask = rmask[:, None] & cmask[None, :]
            row64 = row.to(tl.int64)[:, None]
            # bf16 storage widened here (no-ops for FP32); dx is rounded to DX's dtype by the store
            x = tl.load(X + row64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + row64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(Mean + row, mask=rmask, other=0.0)
            rstd = tl.load(Rstd + row, mask=rmask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            g = dy * gamma[None, :]
            c1 = tl.sum(g * xhat, axis=1) / C
            c2 = tl.sum(g, axis=1) / C
            dx = (g - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
            tl.store(DX + row64 * stride_dx + cols[None, :], dx, mask=mask)
            dg += tl.sum(dy * xhat, axis=0)
            db += tl.sum(dy, axis=0)
        tl.store(PartG + part + cols, dg, mask=cmask)
        tl.store(PartB + part + cols, db, mask=cmask)
    else:
        for r0 in range(0, ROWS, BLOCK_R):
            row = pid * ROWS + r0 + tl.arange(0, BLOCK_R)
            rmask = row < R
            row64 = row.to(tl.int64)[:, None]
            mean = tl.load(Mean + row, mask=rmask, other=0.0)
            rstd = tl.load(Rstd + row, mask=rmask, other=0.0)
            s1 = tl.zeros((BLOCK_R,), dtype=tl.float32)
            s2 = tl.zeros((BLOCK_R,), dtype=tl.float32)
            for c0 in range(0, C, BLOCK_C):  # the row's two sums
                cmask = c0 + cols < C
                mask = rmask[:, None] & cmask[None, :]
                x = tl.load(X + row64 * stride_x + c0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * stride_dy + c0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                gamma = tl.load(Gamma + c0 + cols, mask=cmask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
                g = dy * gamma[None, :]
                s1 += tl.sum(g * xhat, axis=1)
                s2 += tl.sum(g, axis=1)
            c1, c2 = s1 / C, s2 / C
            for c0 in range(0, C, BLOCK_C):  # second read, from L2 while the rows are recent
                cmask = c0 + cols < C
                mask = rmask[:, None] & cmask[None, :]
                x = tl.load(X + row64 * stride_x + c0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * stride_dy + c0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                gamma = tl.load(Gamma + c0 + cols, mask=cmask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
                dx = (dy * gamma[None, :] - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
                tl.store(DX + row64 * stride_dx + c0 + cols[None, :], dx, mask=mask)
                # this program's own partial row: read, add, write back, rows in order (no other
                # program touches it, so the order is fixed)
                pg = tl.load(PartG + part + c0 + cols, mask=cmask, other=0.0)
                pb = tl.load(PartB + part + c0 + cols, mask=cmask, other=0.0)
                tl.store(PartG + part + c0 + cols, pg + tl.sum(dy * xhat, axis=0), mask=cmask)
                tl.store(PartB + part + c0 + cols, pb + tl.sum(dy, axis=0), mask=cmask)
# </kernel>


# ROWS bounds the partials (2 x R / ROWS x C values written and read again: 2% of the compulsory bytes
# at ROWS = 64), fewer where 64 would leave fewer than PROGRAMS programs (the field shape's 1024 rows);
# a one-block row of up to MAX_BLOCK_C columns stays in registers; short rows take several a step.
CONFIG = dict(ROWS=None, MAX_BLOCK_C=8192)
MAX_ROWS, PROGRAMS = 64, 512


def _config(R, C, config):
    cfg = {**CONFIG, **config}
    block_c = min(common.pow2(C), cfg.pop("MAX_BLOCK_C"))
    if cfg["ROWS"] is None:  # the largest power of two <= MAX_ROWS that still makes PROGRAMS programs
        want_rows = max(1, R // PROGRAMS)
        cfg["ROWS"] = min(MAX_ROWS, 1 << (want_rows.bit_length() - 1))
    if "BLOCK_R" not in cfg:  # short rows: several a step, as many as divide ROWS
        # 2048 values a step, 8192 from 4096-wide rows: two rows a step there measured 428 us against 462
        # for one at the large shape (development sweep, run 20261204T0014*: kernels/NOTES.md)
        br = max(1, min(8, (8192 if block_c >= 4096 else 2048) // block_c))
        while cfg["ROWS"] % br and br > 1:
            br //= 2
        cfg["BLOCK_R"] = br
    cfg.setdefault("num_warps", 8 if cfg["BLOCK_R"] * block_c >= 4096 else 4)
    unknown = set(cfg) - {"ROWS", "BLOCK_R", "num_warps", "num_stages"}
    if unknown or cfg["ROWS"] % cfg["BLOCK_R"]:
        raise MageInputError(OP, "config", f"{config} (keys ROWS, BLOCK_R, MAX_BLOCK_C, num_warps; ROWS a "
                                           "multiple of BLOCK_R)")
    return block_c, cfg


def _check_backward_args(x, gamma, mean, rstd, dy):
    """The forward's checks (FP32, or bf16 x with bf16 gamma), dy in x's dtype and shape, and the saved
    FP32 statistics (at either precision: the forward keeps them in FP32)."""
    SPEC.validate(x, gamma, gamma)
    ops.tensor(OP, "dy", dy, (x.dtype,))  # autograd hands a bf16 output's gradient back in bf16
    if tuple(dy.shape) != tuple(x.shape):
        raise MageInputError(OP, "dy", f"must have the output's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    ops.same_device(OP, {"x": x, "dy": dy})
    for name, t in (("mean", mean), ("rstd", rstd)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or tuple(t.shape) != (x.shape[0],):
            raise MageInputError(OP, name, f"must be the forward's saved float32 statistics of shape ({x.shape[0]},)")
        if t.device != x.device:
            raise MageInputError(OP, name, f"is on {t.device} but x is on {x.device}")


def layernorm_backward(x, gamma, mean, rstd, dy, **config):
    """(dx, dgamma, dbeta) for the incoming gradient dy, from the forward's saved statistics."""
    _check_backward_args(x, gamma, mean, rstd, dy)
    common.on_device(OP, {"x": x, "gamma": gamma, "mean": mean, "rstd": rstd, "dy": dy})
    R, C = x.shape
    dx = torch.empty((R, C), dtype=x.dtype, device=x.device)
    if R == 0:
        return dx, torch.zeros_like(gamma), torch.zeros_like(gamma)
    x = x if x.stride(1) == 1 else x.contiguous()
    dy = dy if dy.stride(1) == 1 else dy.contiguous()  # a broadcast gradient (stride 0 rows) is read as is
    block_c, cfg = _config(R, C, config)
    consts, launch = common.split(cfg)
    programs = common.cdiv(R, consts["ROWS"])
    alloc = torch.empty if block_c >= C else torch.zeros  # the chunked road adds into its partial rows
    part_g = alloc((programs, C), dtype=torch.float32, device=x.device)  # FP32 at any precision
    part_b = alloc((programs, C), dtype=torch.float32, device=x.device)
    _layernorm_bwd_kernel[(programs,)](x, gamma.contiguous(), mean.contiguous(), rstd.contiguous(), dy, dx, part_g,
                                       part_b, R, C, x.stride(0), dy.stride(0), dx.stride(0), BLOCK_C=block_c,
                                       ONE_BLOCK=block_c >= C, **consts, **launch)
    dgamma, dbeta = torch.empty_like(gamma), torch.empty_like(gamma)
    reduce.column_sum(part_g, dgamma)
    reduce.column_sum(part_b, dbeta)  # FP32 sums, rounded once by the store where gamma is bf16
    return dx, dgamma, dbeta


@torch.library.custom_op("mage::triton_layernorm_train", mutates_args=())
def layernorm_train_op(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = EPS
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): the forward kernel with its statistics saved (one launch, 8 bytes a row more)."""
    SPEC.validate(x, gamma, beta)  # FP32, or bf16 rows (their statistics still FP32)
    R = x.shape[0]
    mean = torch.empty((R,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((R,), dtype=torch.float32, device=x.device)
    return layernorm(x, gamma, beta, stats=(mean, rstd), eps=eps), mean, rstd


@layernorm_train_op.register_fake
def _(x, gamma, beta, eps=EPS):
    SPEC.validate(x, gamma, beta)
    check_eps(eps)
    stat = x.new_empty((x.shape[0],), dtype=torch.float32)  # FP32 whatever x's dtype
    return torch.empty_like(x), stat, torch.empty_like(stat)


@torch.library.custom_op("mage::triton_layernorm_backward", mutates_args=())
def layernorm_backward_op(x: torch.Tensor, gamma: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                          dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward as an operator, so a compiled graph's backward can call it."""
    return layernorm_backward(x, gamma, mean, rstd, dy)


@layernorm_backward_op.register_fake
def _(x, gamma, mean, rstd, dy):
    _check_backward_args(x, gamma, mean, rstd, dy)
    return torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(gamma)


def _grads(ctx, x, gamma, mean, rstd, dy):
    dx, dgamma, dbeta = torch.ops.mage.triton_layernorm_backward(x, gamma, mean, rstd, dy)
    need = ctx.needs_input_grad
    return (dx if need[0] else None), (dgamma if need[1] else None), (dbeta if need[2] else None)


def _train_setup(ctx, inputs, output):
    x, gamma = inputs[0], inputs[1]
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)  # statistics for the backward, not results to train through
    ctx.save_for_backward(x, gamma, mean, rstd)


def _train_backward(ctx, dy, _dmean, _drstd):
    return *_grads(ctx, *ctx.saved_tensors, dy), None  # eps: a constant, no gradient


torch.library.register_autograd("mage::triton_layernorm_train", _train_backward, setup_context=_train_setup)


def _plain_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], inputs[2])
    ctx.eps = inputs[3]


def _plain_backward(ctx, dy):
    # The inference operator saved no statistics: they are taken again here (a read of x and a write
    # of y the backward discards). The training path uses triton_layernorm_train and pays neither.
    x, gamma, beta = ctx.saved_tensors
    _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, gamma, beta, ctx.eps)
    return *_grads(ctx, x, gamma, mean, rstd, dy), None


torch.library.register_autograd("mage::triton_layernorm", _plain_backward, setup_context=_plain_setup)


@declare("train", OP, "triton")
def train(x, gamma, beta):
    """The Triton column's training path: forward with saved statistics, differentiable in all three."""
    return torch.ops.mage.triton_layernorm_train(x, gamma, beta)[0]


__all__ = ["layernorm_backward", "layernorm_op", "train"]
