"""matmul in Triton: C = A @ B as output tiles, each summed over a loop of K blocks, with programs in
grouped order so a wave of them shares panels of A and B in L2. One kernel serves four precisions:
IEEE fp32 (CUDA-core FMAs), fp32x3 (FP32 accuracy from three TF32 tensor-core products), TF32 and bf16
inputs on the tensor cores, all accumulating in fp32.

B arrives [K, N] with N contiguous. Hopper's TF32 tensor-core instruction (wgmma) reads a 4-byte
operand from shared memory only K-major, so an N-major B is staged with 4-byte copies; the config key
``B_KMAJOR = 1`` makes the launcher copy B K-major first (a second launch, counted in the call's time).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import TileTable, common, register_kernel
from kernels._triton.tiles import grouped_tile

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
    PRECISION: tl.constexpr,  # "ieee" (fp32 FMAs), "tf32" or "tf32x3" (tensor cores); bf16 ignores it
    OFFS_64: tl.constexpr,  # an operand's element offsets pass 2^31: row and column indices in int64
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m, tile_n = grouped_tile(pid, tiles_m, tiles_n, GROUP_M)  # a wave shares panels of A and B in L2
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


def _fma(bm, bn, bk, warps, stages, group=8):
    """One FP32 (FMA) config: tiles, GROUP_M, warps and stages."""
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps, num_stages=stages)


def _tc(bm, bn, bk, warps, stages, kmajor=1, group=8):
    """One tensor-core config: tiles, warps, stages, GROUP_M and B's layout (K-major unless told)."""
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps, num_stages=stages,
                B_KMAJOR=kmajor)


# Names: tile sizes, warps (w), stages (s); GROUP_M where it is not 8 (g); '_bn' where B is read as it
# comes (N-major) on the tensor-core rows, which otherwise copy it K-major. Each table lists its configs
# in the order a tile sweep tries them, the plain one first.
# FP32: what a tuned kernel needs on Hopper: big output tiles (more multiply-adds per loaded value),
# enough warps to hold the accumulator, and 3-4 stages of cp.async prefetch to cover memory latency.
# The FP32 (FMA) dot keeps a whole BLOCK_K slice of both operands in registers, so BLOCK_K = 16 (the
# smallest Triton allows) leaves room for bigger tiles: compiled for sm_90, 128x128x32 with 4 warps
# spills, 128x128x16 with 8 warps does not.
_FP32 = {
    "m32_n32_k32_w4_s2_g1": _fma(32, 32, 32, 4, 2, group=1),
    "m64_n64_k16_w4_s3": _fma(64, 64, 16, 4, 3),
    "m128_n64_k16_w4_s3": _fma(128, 64, 16, 4, 3),
    "m64_n128_k16_w4_s4": _fma(64, 128, 16, 4, 4),
    "m128_n128_k16_w8_s3": _fma(128, 128, 16, 8, 3),
    "m128_n128_k16_w8_s4": _fma(128, 128, 16, 8, 4),
    "m128_n128_k32_w8_s3": _fma(128, 128, 32, 8, 3),
    "m128_n256_k16_w8_s3": _fma(128, 256, 16, 8, 3),
    "m256_n128_k16_w8_s3": _fma(256, 128, 16, 8, 3),
    "m256_n64_k16_w8_s4": _fma(256, 64, 16, 8, 4),
}
# Tensor-core rows. Shared memory holds (BM*BK + BK*BN) * 4 bytes a stage and a block may use 227 KB:
# 128x128x32 is 32 KB a stage (up to 5 stages), 128x256x32 and 256x128x32 48 KB (up to 4), 128x128x64
# 64 KB (3). Each row's first config is the plain one with B as it comes (N-major); the K-major rows
# pair with it to show what the layout costs. Compiled for sm_90, fp32x3 holds the split operands in
# registers too: 128x128 tiles fit with 8 warps (206-246 registers), 4 warps spill, 128x256 and
# 256x128 spill even with 8 warps (16 warps cap a thread at 128 registers and spill more); one such
# row stays so the sweep shows whether the bigger tile's reuse pays for its spills.
_TF32 = {
    "m128_n128_k32_w4_s3_bn": _tc(128, 128, 32, 4, 3, kmajor=0),
    "m128_n256_k32_w8_s3_bn": _tc(128, 256, 32, 8, 3, kmajor=0),  # the TF32 default before B went K-major
    "m128_n128_k32_w4_s4": _tc(128, 128, 32, 4, 4),
    "m128_n128_k32_w8_s4": _tc(128, 128, 32, 8, 4),
    "m128_n128_k32_w8_s5": _tc(128, 128, 32, 8, 5),
    "m128_n128_k64_w8_s3": _tc(128, 128, 64, 8, 3),
    "m128_n256_k32_w8_s3": _tc(128, 256, 32, 8, 3),
    "m128_n256_k32_w8_s4": _tc(128, 256, 32, 8, 4),
    "m128_n256_k32_w8_s3_g16": _tc(128, 256, 32, 8, 3, group=16),
    "m256_n128_k32_w8_s3": _tc(256, 128, 32, 8, 3),
    "m256_n128_k32_w8_s4": _tc(256, 128, 32, 8, 4),
    "m128_n64_k32_w4_s4": _tc(128, 64, 32, 4, 4),  # more programs at 1024^3, where 128x128 tiles leave half the SMs idle
}
_FP32X3 = {
    "m128_n128_k64_w8_s3_bn": _tc(128, 128, 64, 8, 3, kmajor=0),
    "m128_n128_k64_w8_s3": _tc(128, 128, 64, 8, 3),
    "m128_n128_k64_w8_s3_g16": _tc(128, 128, 64, 8, 3, group=16),
    "m128_n128_k32_w8_s3": _tc(128, 128, 32, 8, 3),
    "m128_n128_k32_w8_s4": _tc(128, 128, 32, 8, 4),
    "m128_n128_k32_w8_s5": _tc(128, 128, 32, 8, 5),
    "m128_n256_k32_w8_s3": _tc(128, 256, 32, 8, 3),  # spills about 1 KB a thread
    "m128_n64_k32_w4_s4": _tc(128, 64, 32, 4, 4),
    "m64_n128_k32_w4_s4": _tc(64, 128, 32, 4, 4),
}
# bf16 wgmma reads a 2-byte B N-major as well as K-major, so a K-major copy should only cost; two
# K-major rows check that. 64 bf16 values are 128 bytes, one full line per row.
_BF16 = {
    "m128_n128_k32_w4_s4_bn": _tc(128, 128, 32, 4, 4, kmajor=0),
    "m128_n256_k32_w8_s3_bn": _tc(128, 256, 32, 8, 3, kmajor=0),
    "m128_n128_k64_w8_s3_bn": _tc(128, 128, 64, 8, 3, kmajor=0),
    "m128_n256_k64_w8_s3_bn": _tc(128, 256, 64, 8, 3, kmajor=0),
    "m128_n256_k64_w8_s4_bn": _tc(128, 256, 64, 8, 4, kmajor=0),
    "m256_n128_k64_w8_s3_bn": _tc(256, 128, 64, 8, 3, kmajor=0),
    "m128_n256_k64_w8_s3": _tc(128, 256, 64, 8, 3, kmajor=1),
    "m128_n128_k64_w8_s3": _tc(128, 128, 64, 8, 3, kmajor=1),
}


def _cube_from(lo, hi):
    """M, N and K all in [lo, hi)."""
    return lambda s: all(lo <= s[k] < hi for k in ("M", "N", "K"))


# The rules. FP32: from the recorded tile sweep on the H200 (kernels/NOTES.md), the base is the best
# measured at 1024^3 (and close to the best at 4096^3); 128x128x32 with 8 warps and 3 stages was the
# best at 4096^3 (8192^3, the size sweep's last point, was measured with the base and keeps it).
# Tensor-core rows: the best of their tile sweep at 4096^3 (run 20261203T1645*, kernels/NOTES.md),
# fp32x3 128x128x64 and TF32 128x256x32, both with GROUP_M 16 and B K-major, bf16 128x256x64 with B
# N-major; for M and N in [1024, 2048) (not swept) 128x64 tiles, 128 programs for 132 SMs at 1024^2
# where 128x256 tiles made 32.
_FEW_TILES = lambda s: 1024 <= s["M"] < 2048 and 1024 <= s["N"] < 2048  # noqa: E731
_SIZES = ("M", "K", "N")
TILES = {
    "fp32": TileTable("matmul", _FP32, base="m128_n64_k16_w4_s3",
                      rule=(("m128_n128_k32_w8_s3", _cube_from(4096, 8192)),), sizes=_SIZES),
    "fp32x3": TileTable("matmul", _FP32X3, base="m128_n128_k64_w8_s3_g16",
                        rule=(("m128_n64_k32_w4_s4", _FEW_TILES),), sizes=_SIZES),
    "tf32": TileTable("matmul", _TF32, base="m128_n256_k32_w8_s3_g16", rule=(("m128_n64_k32_w4_s4", _FEW_TILES),),
                      sizes=_SIZES),
    "bf16": TileTable("matmul", _BF16, base="m128_n256_k64_w8_s3_bn", sizes=_SIZES),
}
FIRST = TILES["fp32"]["m32_n32_k32_w4_s2_g1"]
PRECISION = {"fp32": "ieee", "fp32x3": "tf32x3", "tf32": "tf32", "bf16": "ieee"}


_FLOAT = frozenset(ops.FLOAT)


def _good(A, B) -> bool:
    """The spec's checks of a well-formed call in a few attribute reads: True only where
    ``SPEC.validate`` passes (a False sends the call to it, which names what is wrong)."""
    return (type(A) is torch.Tensor and type(B) is torch.Tensor and A.dtype in _FLOAT and B.dtype is A.dtype
            and A.ndim == 2 and B.ndim == 2 and B.shape[0] == A.shape[1] and A.device == B.device)


def _checked(A, B) -> None:
    """Every check of the spec and the device check, once per call: the common case (CUDA tensors
    that pass) in a few attribute reads, anything else through the full checks, which raise."""
    if not (_good(A, B) and A.is_cuda):
        SPEC.validate(A, B)
        common.on_device("matmul", {"A": A, "B": B})


def _plan(consts, launch, M, K, N, precision, a_strides, b_strides):
    """(B_KMAJOR, grid, kernel keywords) of a call from its tiles, sizes, the dot's precision road (a
    name, ``PRECISION[dtype]``, looked up on every call) and strides (memoised by ``TileTable.plan``)."""
    kmajor = consts.pop("B_KMAJOR", 0)  # a launcher choice, not a constant of the kernel
    if kmajor not in (0, 1):
        raise MageInputError("matmul", "config", f"B_KMAJOR must be 0 or 1, got {kmajor!r}")
    b_reach = (N - 1) * K + (K - 1) if kmajor else common.reach((K, N), b_strides)  # the copy: [N, K]
    offs_64 = max(common.reach((M, K), a_strides), b_reach, M * N - 1) >= common.INT32_LIMIT
    grid = (common.cdiv(M, consts["BLOCK_M"]) * common.cdiv(N, consts["BLOCK_N"]),)
    return kmajor, grid, dict(PRECISION=precision, OFFS_64=offs_64, **consts, **launch)


def entry(A, B, out, dtype, fp32_default: str, roads) -> tuple:
    """(precision, output buffer) of a call, after every check of its arguments: the inputs, the
    precision (one of ``roads``; FP32 inputs default to ``fp32_default``) against A's dtype, and ``out``
    (a fresh buffer when None). Shared by the plain road and the Hopper road."""
    _checked(A, B)
    dtype = dtype or ("bf16" if A.dtype == torch.bfloat16 else fp32_default)
    if dtype not in roads:
        raise MageInputError("matmul", "dtype", f"must be one of {sorted(roads)}, got {dtype!r}")
    if (dtype == "bf16") != (A.dtype is torch.bfloat16):
        raise MageInputError("matmul", "A", f"has dtype {A.dtype}, which does not fit precision {dtype!r}")
    M, N = A.shape[0], B.shape[1]
    if out is None:
        return dtype, A.new_empty((M, N))
    ops.check_out("matmul", out, (M, N), A.dtype, A.device)
    return dtype, out


def matmul(A, B, out=None, dtype=None, **config):
    """C = A @ B. ``dtype``: 'fp32' (IEEE, the default for fp32 inputs), 'fp32x3' (FP32 accuracy on
    the tensor cores), 'tf32', or 'bf16' (bf16 inputs, fp32 accumulation, bf16 output as torch gives).
    ``config`` overrides the tile sizes and, on the tensor-core rows, ``B_KMAJOR``."""
    dtype, out = entry(A, B, out, dtype, "fp32", PRECISION)
    (M, K), N = A.shape, B.shape[1]
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    # the precision road is part of the key, not resolved inside the memoised plan: a plan made before
    # PRECISION changed (a test's slip, say) must not keep the road it had
    kmajor, grid, kw = TILES[dtype].plan(_plan, (M, K, N), config, PRECISION[dtype], A.stride(), B.stride())
    # K-major: the same kernel reads a [N, K] copy through swapped strides. The copy is a launch of
    # its own, timed with the call (K * N * 4 bytes read and written, plus an allocation of K * N * 4);
    # a B that is already K-major (a transposed view) is not copied.
    if kmajor:
        B = B.t().contiguous()
        stride_bk, stride_bn = B.stride(1), B.stride(0)
    else:
        stride_bk, stride_bn = B.stride()
    common.launch(_matmul_kernel, grid, A, B, out, M, N, K, *A.stride(), stride_bk, stride_bn, *out.stride(), **kw)
    return out


def launches(config: dict) -> int:
    """Launches one call makes with ``config``, for row-major inputs: the kernel's, and the K-major
    copy of B where the config asks for it."""
    return 1 + int(config.get("B_KMAJOR", 0))


# Triton 3.6's interpreter multiplies bf16 dot operands wrongly (results off by ~1e9), so the bf16
# row is checked on the GPU only. It computes TF32 and tf32x3 dots in full FP32, so on the CPU those
# rows check indexing and layouts, not precision (the GPU tests check that).
for _dtype, _tiles in TILES.items():
    register_kernel("matmul", matmul, _tiles, precision=_dtype, interpret=_dtype != "bf16", dtype=_dtype)


@torch.library.custom_op("mage::triton_matmul", mutates_args=())
def matmul_op(A: torch.Tensor, B: torch.Tensor, dtype: str) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it (opaque to Inductor)."""
    return matmul(A, B, dtype=dtype)


@matmul_op.register_fake
def _(A, B, dtype):
    SPEC.validate(A, B)  # metadata only: a call with any 'meta' input lands here
    return A.new_empty((A.shape[0], B.shape[1]))
