"""matmul in Triton: C = A @ B as output tiles, each summed over a loop of K blocks, with programs in
grouped order so a wave of them shares panels of A and B in L2. One kernel serves three precisions:
IEEE fp32 (CUDA-core FMAs), TF32 and bf16 inputs on the tensor cores, all accumulating in fp32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import common, register_kernel

from .spec import SPEC


# <kernel>
@triton.jit
def _matmul_kernel(
    A, B, C,  # pointers to A [M, K], B [K, N] and the output C [M, N]
    M, N, K,  # problem sizes (runtime: one compiled kernel serves every shape)
    stride_am, stride_ak,  # A's strides, so transposed views need no copy
    stride_bk, stride_bn,  # B's strides
    stride_cm, stride_cn,  # C's strides
    BLOCK_M: tl.constexpr,  # output tile rows
    BLOCK_N: tl.constexpr,  # output tile columns
    BLOCK_K: tl.constexpr,  # depth of one step of the K loop
    GROUP_M: tl.constexpr,  # tile rows walked before moving right (L2 reuse of B's panels)
    PRECISION: tl.constexpr,  # "ieee" (fp32 FMAs) or "tf32" (tensor cores); bf16 inputs ignore it
    OFFS_64: tl.constexpr,  # an operand's element offsets pass 2^31: row and column indices in int64
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: programs pid, pid+1, ... go down a column of GROUP_M tiles before moving right,
    # so the programs running at once read GROUP_M panels of A and a few of B, not all of B.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % group_m
    tile_n = (pid % per_group) // group_m
    # Rows and columns past the edge wrap around (modulo) instead of being masked: the loads stay
    # in bounds without a mask in the inner loop, and the store below drops the wrapped values.
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if OFFS_64:  # index times stride would wrap in int32 (a 46341 x 46341 operand already does)
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = A + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = B + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = ks < K - k0  # the last step may be partial; zeros add nothing
        a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    tl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
             acc.to(C.dtype.element_ty), mask=mask)
# </kernel>


FIRST = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4, num_stages=2)
# What a tuned FP32 kernel needs on Hopper: big output tiles (more multiply-adds per loaded value),
# enough warps to hold the accumulator, and 3-4 stages of cp.async prefetch to cover memory latency.
# The FP32 (FMA) dot keeps a whole BLOCK_K slice of both operands in registers, so BLOCK_K = 16 (the
# smallest Triton allows) leaves room for bigger tiles: compiled for sm_90, 128x128x32 with 4 warps
# spills, 128x128x16 with 8 warps does not.
SWEEP = [
    FIRST,
    dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=3),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=16, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=16, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=16, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=16, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=256, BLOCK_N=64, BLOCK_K=16, GROUP_M=8, num_warps=8, num_stages=4),
]
# Tensor-core rows want deeper K steps (bf16: 64 values are 128 bytes, one full line per row). TF32
# operands are twice as wide, so 128x256x64 with 3 stages needs 288 KB of shared memory: too much.
SWEEP_TF32 = [
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
]
SWEEP_BF16 = SWEEP_TF32 + [dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)]
# Chosen config per precision and shape set, from the development run of 2026-12-02 on the H200
# (kernels/NOTES.md): the best measured at 1024^3 (field) and 4096^3 (large, and TF32/bf16).
_FIELD = SWEEP[2]  # 128x64x16, 4 warps: the best at 1024^3, and close to the best at 4096^3
_LARGE = SWEEP[6]  # 128x128x32, 8 warps, 3 stages: the best at 4096^3
DEFAULTS = {
    "fp32": {"field": _FIELD, "large": _LARGE, "sweep": _FIELD},
    "tf32": {"field": SWEEP_TF32[1], "large": SWEEP_TF32[1], "sweep": SWEEP_TF32[1]},
    "bf16": {"field": SWEEP_BF16[3], "large": SWEEP_BF16[3], "sweep": SWEEP_BF16[3]},
}
PRECISION = {"fp32": "ieee", "tf32": "tf32", "bf16": "ieee"}


def matmul(A, B, out=None, dtype=None, **config):
    """C = A @ B. ``dtype``: 'fp32' (IEEE, the default for fp32 inputs), 'tf32', or 'bf16' (bf16
    inputs, fp32 accumulation, bf16 output as torch gives). ``config`` overrides the tile sizes."""
    SPEC.validate(A, B)
    dtype = dtype or ("bf16" if A.dtype == torch.bfloat16 else "fp32")
    if (dtype == "bf16") != (A.dtype == torch.bfloat16):
        raise MageInputError("matmul", "A", f"has dtype {A.dtype}, which does not fit precision {dtype!r}")
    (M, K), N = A.shape, B.shape[1]
    ops.check_out("matmul", out, (M, N), A.dtype, A.device)
    common.on_device("matmul", {"A": A, "B": B})
    out = torch.empty((M, N), dtype=A.dtype, device=A.device) if out is None else out
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    cfg = common.choose("matmul", DEFAULTS[dtype], dict(M=M, K=K, N=N), config)
    consts, launch = common.split(cfg)
    grid = (triton.cdiv(M, consts["BLOCK_M"]) * triton.cdiv(N, consts["BLOCK_N"]),)
    _matmul_kernel[grid](A, B, out, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                         out.stride(0), out.stride(1), PRECISION=PRECISION[dtype],
                         OFFS_64=common.offsets_64(A, B, out), **consts, **launch)
    return out


# Triton 3.6's interpreter multiplies bf16 dot operands wrongly (results off by ~1e9), so the bf16
# row is checked on the GPU only.
for _dtype, _sweep in (("fp32", SWEEP), ("tf32", SWEEP_TF32), ("bf16", SWEEP_BF16)):
    register_kernel("matmul", matmul, DEFAULTS[_dtype], _sweep, precision=_dtype, interpret=_dtype != "bf16",
                    dtype=_dtype)


@torch.library.custom_op("mage::triton_matmul", mutates_args=())
def matmul_op(A: torch.Tensor, B: torch.Tensor, dtype: str) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it (opaque to Inductor)."""
    return matmul(A, B, dtype=dtype)


@matmul_op.register_fake
def _(A, B, dtype):
    SPEC.validate(A, B)  # metadata only: a call with any 'meta' input lands here
    return A.new_empty((A.shape[0], B.shape[1]))
