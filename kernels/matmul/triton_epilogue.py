"""A GEMM with a block's epilogue fused: out = act(A W^T + bias) (+ residual, or * sigmoid(gate)), W in
``Linear``'s [N, K] layout. The model blocks (kernels/*_block) call it for their projections. The
epilogue runs on the accumulator in registers, so a projection's pre-activation (the MLP's [T, hidden],
its largest intermediate) is never written and read back, and a bias, a residual or an output gate
costs one read of its operand and no launch of its own.

FP32 storage at FP32 accuracy on the tensor cores: ``tf32x3`` (each operand split into a TF32 high part
and a remainder, three TF32 products a step, as the matmul's fp32x3 row). wgmma reads a 4-byte B
operand only K-major: W [N, K] with K contiguous is B = W^T K-major, read in place. A W stored the other
way ([K, N] transposed, as the triangle update keeps its projections) is copied K-major first by the
caller that knows it (``kmajor``), a launch it counts.

bf16 storage: the same kernel on bf16 operands is the tensor cores' bf16 product with the FP32
accumulator ("ieee" names no decomposition: tf32x3 splits FP32 operands only); the bias, GELU,
residual and gate run on that FP32 accumulator and the store rounds once to bf16.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import common
from kernels._triton.tiles import grouped_tile


# <kernel>
@triton.jit
def _gemm_epilogue_kernel(
    A, W, Bias, Res, C,  # A [M, K], W [N, K], bias [N], Res [M, N] (read unless EPILOGUE is 0), output C [M, N]
    M, N, K,
    stride_am, stride_ak, stride_wn, stride_wk, stride_rm, stride_rn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # tile rows walked before moving right (a wave shares W's panels in L2)
    PRECISION: tl.constexpr,  # "tf32x3": FP32 accuracy on the tensor cores; "ieee" for bf16 operands
    GELU: tl.constexpr,  # exact (erf) GELU of A W^T + bias
    EPILOGUE: tl.constexpr,  # after the bias (and GELU): 0 nothing, 1 add Res, 2 multiply by sigmoid(Res)
    OFFS_64: tl.constexpr,  # an element offset passes 2^31: indices in int64
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m, tile_n = grouped_tile(pid, tiles_m, tiles_n, GROUP_M)
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if OFFS_64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    # edge rows and columns wrap (modulo) so the inner loop needs no row or column mask; the store drops them
    a_ptrs = A + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = W + ks[:, None] * stride_wk + (cols % N)[None, :] * stride_wn  # B = W^T, [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = ks < K - k0
        a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_wk
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    acc += tl.load(Bias + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]  # (a no-op at FP32)
    if GELU:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))  # erf(z / sqrt 2)
    if EPILOGUE != 0:
        r = tl.load(Res + rows[:, None] * stride_rm + cols[None, :] * stride_rn, mask=mask, other=0.0).to(tl.float32)
        if EPILOGUE == 1:
            acc += r
        else:
            acc *= tl.sigmoid(r)
    tl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(C.dtype.element_ty), mask=mask)
# </kernel>


def gemm_epilogue(A, W, bias, out, residual=None, gelu=False, gate=None, BLOCK_M=128, BLOCK_N=64, BLOCK_K=32,
                  GROUP_M=8, num_warps=4, num_stages=4):
    """out = act(A W^T + bias) (+ residual, or * sigmoid(gate): at most one of the two, each [M, N] with
    any strides). The caller (a block's launcher) has checked every shape, dtype and device; ``out`` is
    an [M, N] buffer that overlaps no operand."""
    (M, K), N = A.shape, W.shape[0]
    if M == 0 or N == 0:
        return out
    bias = bias.contiguous()
    if residual is not None and gate is not None:
        raise ValueError("gemm_epilogue: a residual or a gate, not both")  # a caller's bug, not an input
    epilogue = 1 if residual is not None else 2 if gate is not None else 0
    res = residual if residual is not None else gate if gate is not None else out  # unread with EPILOGUE 0
    precision = "tf32x3" if A.dtype == torch.float32 else "ieee"
    if A.dtype == torch.bfloat16 and common.interpreting():
        # Triton 3.6's interpreter multiplies bf16 tiles as their raw 16-bit patterns; the FP32 product
        # of two bf16 values is exact, so FP32 copies give the sums the tensor cores form
        A, W = A.float(), W.float()
    grid = (common.cdiv(M, BLOCK_M) * common.cdiv(N, BLOCK_N),)
    _gemm_epilogue_kernel[grid](
        A, W, bias, res, out, M, N, K, A.stride(0), A.stride(1), W.stride(0), W.stride(1),
        res.stride(0), res.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, PRECISION=precision, GELU=gelu,
        EPILOGUE=epilogue, OFFS_64=common.offsets_64(A, W, res, out),
        num_warps=num_warps, num_stages=num_stages)
    return out


def hopper_epilogue(A, W, bias, out, residual=None, gelu=False, gate=None, tiles=None):
    """``gemm_epilogue`` on matmul's Hopper road (TMA loads, warpgroup MMA, a persistent grid;
    ``kernels.matmul.triton_hopper``) with that road's own tiles for the call's sizes, or ``tiles`` (overrides
    of its table's choice): a block's road 'hopper'. tf32x3 at FP32 storage, the bf16 product at bf16; W [N, K]
    read in place where K is contiguous. Refused by name on a card without TMA and warpgroup MMA."""
    from kernels.matmul import triton_hopper as hop  # (imported on the road's first use only)
    if not hop.available(A.device):
        raise MageInputError("linear", "config", "the 'hopper' GEMM road needs an sm_90 (Hopper) GPU")
    if residual is not None and gate is not None:
        raise ValueError("hopper_epilogue: a residual or a gate, not both")  # a caller's bug, not an input
    return hop.gemm(A, W, precision="fp32x3" if A.dtype == torch.float32 else "bf16", b_nk=True, out=out,
                    bias=bias, gelu=gelu, residual=residual, gate=gate, **(tiles or {}))


def as_matmul_config(tiles: dict) -> dict:
    """The matmul's Triton column's config for the tiles a block passes here (a block config's GEMM keys):
    the same kernel shape without the epilogue, for timing the operation alone with the block's tiles. W
    is read K-major here, so the matmul reads its B K-major too (its launcher copies B first, a launch it
    counts)."""
    return dict(BLOCK_M=tiles["BLOCK_M"], BLOCK_N=tiles["BLOCK_N"], BLOCK_K=tiles["BLOCK_K"],
                GROUP_M=tiles.get("GROUP_M", 8), num_warps=tiles["num_warps"], num_stages=tiles["num_stages"],
                B_KMAJOR=1)


def _check_linear(x, W, b) -> None:
    """A model's Linear as the epilogue GEMM reads it: x [M, K], W [N, K], b [N], one floating dtype
    (FP32 or bf16) on one device. Named errors here, before Triton's own, which name neither."""
    op, floats = "linear", (torch.float32, torch.bfloat16)
    ops.tensor(op, "x", x, floats, 2)
    ops.tensor(op, "W", W, floats, 2)
    ops.tensor(op, "b", b, floats, 1)
    ops.same_dtype(op, {"x": x, "W": W, "b": b})
    ops.same_device(op, {"x": x, "W": W, "b": b})
    ops.dim(op, "W", W, 1, x.shape[1], "x's K")
    ops.dim(op, "b", b, 0, W.shape[0], "W's N")


@torch.library.custom_op("mage::triton_linear", mutates_args=())
def linear_op(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """act(x W^T + b) as one kernel (``gelu``: the exact GELU in the epilogue): a model's ``nn.Linear``,
    or its Linear and GELU fused, swapped into the model as a PyTorch operator. FP32 storage runs tf32x3,
    bf16 storage the bf16 tensor-core product; both accumulate in FP32. Forward only (inference)."""
    _check_linear(x, W, b)
    common.on_device("linear", {"x": x, "W": W, "b": b})
    out = x.new_empty((x.shape[0], W.shape[0]))
    x, W = (x if x.stride(1) == 1 else x.contiguous()), (W if W.stride(1) == 1 else W.contiguous())
    if linear_road(x) == "hopper":
        return hopper_epilogue(x, W, b, out, gelu=gelu)
    return gemm_epilogue(x, W, b, out, gelu=gelu, **LINEAR_TILES[x.dtype])


# The plain road's tile for a model's Linear: the MLP block's sweep's fastest fused tile at T = 2,048 (H200,
# data/h200/tiles.csv, runs 20261204T205225Z and 20261205T100744Z): at FP32 280 us against 310 for this
# module's default 128x64x32 (and 12.1 ms against 14.1 for the Hopper road at T = 4,096, d = 4,096); at bf16
# 58.5 us, where the default's BLOCK_K of 32 is half a 128-byte line of bf16
LINEAR_TILES = {torch.float32: dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=16, num_warps=8, num_stages=3),
                torch.bfloat16: dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=16, num_warps=8, num_stages=4)}


def linear_road(x) -> str:
    """The road the Linear operator takes for input ``x``: 'hopper' for FP32 on an sm_90 GPU (its tf32x3
    took 617 us against the plain road's 706 over V-JEPA 2's four Linear shapes, one H100 run,
    data/h100/models/linear_probe.txt), else 'plain': at bf16 the Hopper road's tiles took 259 us against
    the plain road's 179 there (cuBLAS 111), and the interpreter keeps the plain road."""
    from kernels.matmul import triton_hopper as hop  # (a light import: the road's kernels compile on use)
    on_sm90 = x.is_cuda and not common.interpreting() and hop.available(x.device)
    return "hopper" if x.dtype == torch.float32 and on_sm90 else "plain"


@linear_op.register_fake
def _(x, W, b, gelu=False):
    _check_linear(x, W, b)
    return x.new_empty((x.shape[0], W.shape[0]))
