"""triangle in Triton: O_ijc = sum_k A_ikc B_jkc. For each channel c it is the matmul
A[:, :, c] @ B[:, :, c]^T. Two roads, chosen by the config key LAYOUT:

- "in_place": read the [N, N, C] layout as it is (one launch). A program takes an (i, j) tile of
  BLOCK_C neighbouring channels (contiguous floats) and reduces over k, as one batched 3-d dot or, with
  PER_CHANNEL, split in registers into one 2-d dot per channel.
- "channel_major": copy A and B to [C, N, N], then a batched GEMM (``_channel_major.py``; two or three
  launches, with the output epilogue STORE).

Three precisions: 'fp32' (IEEE products on the FMA units) and 'fp32x3' (each product as three TF32
tensor-core products, ``input_precision="tf32x3"``), both FP32 storage held to the FP32 tolerance; and
'bf16' (bf16 storage: the tensor cores' bf16 products, exact in FP32, summed in FP32 and rounded once at
the output's store), held to bf16's.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from mage import ops
from mage.errors import MageInputError

from kernels._triton import TileTable, common, register_kernel
from kernels._triton.tiles import grouped_tile

from . import _channel_major as road
from .spec import SPEC


# <kernel>
@triton.jit
def _unpack(t, BLOCK_C: tl.constexpr):
    # [..., BLOCK_C] -> BLOCK_C tensors [...], channel 0 first (BLOCK_C is 2 or 4)
    if BLOCK_C == 2:
        t0, t1 = tl.split(t)
        return t0, t1, t0, t1
    else:
        even, odd = tl.split(tl.reshape(t, t.shape[:-1] + [2, 2]))  # c = 2p + q: q = 0, then q = 1
        t0, t2 = tl.split(even)
        t1, t3 = tl.split(odd)
        return t0, t1, t2, t3


@triton.jit
def _triangle_kernel(
    A, B, O,  # pointers to A, B and the output O, all [N, N, C]
    N, C,  # nodes and channels
    sa_i, sa_k, sa_c,  # A's strides over (i, k, c)
    sb_j, sb_k, sb_c,  # B's strides over (j, k, c)
    so_i, so_j, so_c,  # O's strides over (i, j, c)
    BLOCK_I: tl.constexpr,  # output tile rows (i)
    BLOCK_J: tl.constexpr,  # output tile columns (j)
    BLOCK_K: tl.constexpr,  # depth of one step of the k loop
    BLOCK_C: tl.constexpr,  # channels per program, contiguous in memory
    GROUP_I: tl.constexpr,  # tile rows walked before moving right (L2 reuse, as in matmul)
    PER_CHANNEL: tl.constexpr,  # BLOCK_C = 2 or 4 loaded together, then one 2-d dot per channel
    OFFS_64: tl.constexpr,  # an operand's element offsets pass 2^31: i and j indices in int64
    PRECISION: tl.constexpr,  # "ieee" (FMA; bf16 tiles: bf16 products) or "tf32x3" (three TF32 products)
):
    pid = tl.program_id(0)
    tiles_i = tl.cdiv(N, BLOCK_I)
    tiles_j = tl.cdiv(N, BLOCK_J)
    tile_i, tile_j = grouped_tile(pid, tiles_i, tiles_j, GROUP_I)
    rows = tile_i * BLOCK_I + tl.arange(0, BLOCK_I)
    cols = tile_j * BLOCK_J + tl.arange(0, BLOCK_J)
    if OFFS_64:  # i and j times their strides (N * C each) would wrap in int32
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ks = tl.arange(0, BLOCK_K)
    # As in matmul, indices past the edge wrap (modulo) so only k needs a mask in the loop.
    if PER_CHANNEL:
        # a[i, k, c] = A[i, k, c] and b[k, j, c] = B[j, k, c]: each (i, k) is a run of BLOCK_C floats,
        # split in registers into BLOCK_C matrices, each fed to the 2-d dot that matmul uses.
        a_ptrs = A + (rows % N)[:, None, None] * sa_i + ks[None, :, None] * sa_k + (chans % C)[None, None, :] * sa_c
        b_ptrs = B + ks[:, None, None] * sb_k + (cols % N)[None, :, None] * sb_j + (chans % C)[None, None, :] * sb_c
        acc0 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        acc3 = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
        for k0 in range(0, N, BLOCK_K):
            kmask = ks < N - k0
            a0, a1, a2, a3 = _unpack(tl.load(a_ptrs, mask=kmask[None, :, None], other=0.0), BLOCK_C)
            b0, b1, b2, b3 = _unpack(tl.load(b_ptrs, mask=kmask[:, None, None], other=0.0), BLOCK_C)
            acc0 = tl.dot(a0, b0, acc0, input_precision=PRECISION)
            acc1 = tl.dot(a1, b1, acc1, input_precision=PRECISION)
            if BLOCK_C == 4:
                acc2 = tl.dot(a2, b2, acc2, input_precision=PRECISION)
                acc3 = tl.dot(a3, b3, acc3, input_precision=PRECISION)
            a_ptrs += BLOCK_K * sa_k
            b_ptrs += BLOCK_K * sb_k
        if BLOCK_C == 2:
            acc = tl.join(acc0, acc1)
        else:
            acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_I, BLOCK_J, BLOCK_C))
        mask = (rows < N)[:, None, None] & (cols < N)[None, :, None] & (chans < C)[None, None, :]
        tl.store(O + rows[:, None, None] * so_i + cols[None, :, None] * so_j + chans[None, None, :] * so_c,
                 acc, mask=mask)
    else:
        # a[c, i, k] = A[i, k, c] and b[c, k, j] = B[j, k, c]: a batch of BLOCK_C matrix products.
        a_ptrs = A + (chans % C)[:, None, None] * sa_c + (rows % N)[None, :, None] * sa_i + ks[None, None, :] * sa_k
        b_ptrs = B + (chans % C)[:, None, None] * sb_c + ks[None, :, None] * sb_k + (cols % N)[None, None, :] * sb_j
        acc = tl.zeros((BLOCK_C, BLOCK_I, BLOCK_J), dtype=tl.float32)
        for k0 in range(0, N, BLOCK_K):
            kmask = ks < N - k0
            a = tl.load(a_ptrs, mask=kmask[None, None, :], other=0.0)
            b = tl.load(b_ptrs, mask=kmask[None, :, None], other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * sa_k
            b_ptrs += BLOCK_K * sb_k
        mask = (chans < C)[:, None, None] & (rows < N)[None, :, None] & (cols < N)[None, None, :]
        tl.store(O + chans[:, None, None] * so_c + rows[None, :, None] * so_i + cols[None, None, :] * so_j,
                 acc, mask=mask)
# </kernel>


# Every config names every key, so each recorded row says which road ran. In place: PER_CHANNEL as
# above; K_INNER unused. Channel-major: STORE, the output epilogue ("direct" or "permute", see
# _channel_major.py), and K_INNER, the order of the [C, N, N] copies: k innermost for the tensor cores
# (TF32 products read both operands K-major), i and j innermost for the FMA dot (with k innermost it
# reads shared memory 4 bytes at a time, compiled for sm_90).
def _in_place(bi, bj, bk, bc, warps, stages, group=8, per_channel=False):
    return dict(LAYOUT="in_place", STORE="direct", K_INNER=False, BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk, BLOCK_C=bc,
                GROUP_I=group, PER_CHANNEL=per_channel, num_warps=warps, num_stages=stages)


def _channel_major(store, bi, bj, bk, bc, warps, stages, group=8, k_inner=True):
    return dict(LAYOUT="channel_major", STORE=store, K_INNER=k_inner, BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk, BLOCK_C=bc,
                GROUP_I=group, PER_CHANNEL=False, num_warps=warps, num_stages=stages)


# Names: the road (in place, or channel-major with its 'permute' or 'direct' epilogue), BLOCK_I x
# BLOCK_J x BLOCK_K, channels a program (c), warps (w), stages (s); GROUP_I where it is not 8 (g);
# '_per_channel' for the in-place 2-d dots; '_ij' for channel-major copies with i and j innermost.
# Each table lists its configs in the order a tile sweep tries them, the plain one first.
# fp32: first one channel a program, the "C independent matmuls" read literally in place; every load
# is a single float C apart, so each 32-byte sector fetched serves one value.
_FP32 = {
    "in_place_32x32x32_c1_w4_s2_g1": _in_place(32, 32, 32, 1, 4, 2, group=1),
    "in_place_32x32x16_c8_w4_s3": _in_place(32, 32, 16, 8, 4, 3),
    "in_place_128x128x16_c1_w8_s3": _in_place(128, 128, 16, 1, 8, 3),
    # 2 or 4 neighbouring channels loaded as 8- or 16-byte runs, then the 2-d dot per channel
    "in_place_128x128x16_c2_w8_s3_per_channel": _in_place(128, 128, 16, 2, 8, 3, per_channel=True),
    "in_place_128x64x16_c4_w8_s3_per_channel": _in_place(128, 64, 16, 4, 8, 3, per_channel=True),
    "in_place_64x64x16_c4_w4_s3_per_channel": _in_place(64, 64, 16, 4, 4, 3, per_channel=True),
    # Channel-major, FMA dot: the matmul kernel's FP32 tiles (BLOCK_K = 16 keeps the operand slices the
    # FMA dot holds in registers from spilling at 128x128 with 8 warps); copies with i and j innermost.
    "permute_128x128x16_c1_w8_s3_ij": _channel_major("permute", 128, 128, 16, 1, 8, 3, k_inner=False),
    "permute_128x128x16_c1_w8_s4_ij": _channel_major("permute", 128, 128, 16, 1, 8, 4, k_inner=False),
    "permute_128x64x16_c1_w4_s3_ij": _channel_major("permute", 128, 64, 16, 1, 4, 3, k_inner=False),
    "permute_128x128x16_c1_w8_s3": _channel_major("permute", 128, 128, 16, 1, 8, 3),  # k innermost: 4-byte shared loads
    "direct_128x128x16_c1_w8_s3_ij": _channel_major("direct", 128, 128, 16, 1, 8, 3, k_inner=False),  # the stride-C scatter, to price it
    # several channels a program: smaller tiles, since the program holds BLOCK_C finished tiles too
    "direct_64x64x16_c2_w4_s3_ij": _channel_major("direct", 64, 64, 16, 2, 4, 3, k_inner=False),
    "direct_64x64x16_c4_w8_s3_ij": _channel_major("direct", 64, 64, 16, 4, 8, 3, k_inner=False),
    "direct_32x64x16_c8_w8_s3_ij": _channel_major("direct", 32, 64, 16, 8, 8, 3, k_inner=False),
}
# fp32x3: three TF32 wgmma products per k step of 8, both operands K-major on the channel-major road.
# BLOCK_K = 32 is one 128-byte line of k per row; a stage of 128x128x32 is 32 KB of shared memory, so
# 3-4 stages fit under the 227 KB a block may use (128x128x64 only with 2). Compiled for sm_90,
# 128x256 tiles and the in-place 3-d dot spill registers, so neither is here.
_FP32X3 = {
    # in place: the layout's price at this precision (channels split in registers, then 2-d dots)
    "in_place_64x64x16_c2_w4_s3_per_channel": _in_place(64, 64, 16, 2, 4, 3, per_channel=True),
    "in_place_128x64x16_c2_w8_s3_per_channel": _in_place(128, 64, 16, 2, 8, 3, per_channel=True),
    "permute_128x128x32_c1_w8_s3": _channel_major("permute", 128, 128, 32, 1, 8, 3),
    "permute_128x128x32_c1_w8_s4": _channel_major("permute", 128, 128, 32, 1, 8, 4),
    "permute_128x128x64_c1_w8_s2": _channel_major("permute", 128, 128, 64, 1, 8, 2),
    "permute_128x64x32_c1_w4_s4": _channel_major("permute", 128, 64, 32, 1, 4, 4),
    "permute_64x128x32_c1_w4_s4": _channel_major("permute", 64, 128, 32, 1, 4, 4),
    "direct_128x128x32_c1_w8_s3": _channel_major("direct", 128, 128, 32, 1, 8, 3),  # the stride-C scatter
    "direct_128x64x32_c2_w8_s3": _channel_major("direct", 128, 64, 32, 2, 8, 3),
    "direct_64x64x32_c4_w8_s3": _channel_major("direct", 64, 64, 32, 4, 8, 3),
    "direct_64x32x32_c8_w4_s3": _channel_major("direct", 64, 32, 32, 8, 4, 3),
}
# bf16 (predictions until a GPU sweep): bf16 tensor-core products on the channel-major road, k innermost
# (both operands K-major, as wgmma reads them), BLOCK_K = 64 (a 128-byte line of bf16): the triangle
# update block's bf16 contraction tiles (its first config first). 'direct' with BLOCK_C channels
# stores runs of BLOCK_C bf16 values (16 fill a 32-byte sector).
_BF16 = {
    "permute_128x128x64_c1_w8_s3": _channel_major("permute", 128, 128, 64, 1, 8, 3),
    "permute_128x128x64_c1_w8_s4": _channel_major("permute", 128, 128, 64, 1, 8, 4),
    "permute_128x64x64_c1_w4_s4": _channel_major("permute", 128, 64, 64, 1, 4, 4),
    "direct_64x64x64_c8_w8_s3": _channel_major("direct", 64, 64, 64, 8, 8, 3),
    "direct_64x32x64_c16_w8_s3": _channel_major("direct", 64, 32, 64, 16, 8, 3),  # 128 FP32 values a thread, as at 64 x 64 x 8
}


def _few_programs(s) -> bool:
    """N in (64, 128], C <= 64: 128 x 128 tiles make too few programs to fill the SMs."""
    return 64 < s["N"] <= 128 and s["C"] <= 64


# The rules: the base, the best of the H200 tile sweep at N = 384, C = 128 (run 20261203T1645*,
# kernels/NOTES.md, "triangle: what the layout costs"): channel-major with the permuting epilogue,
# 128 x 64 tiles and 4 warps at fp32 and fp32x3; at bf16 the block's tiles, so the operation alone at
# the block's shapes runs what the block runs (Amdahl's s). Few programs (the field notes' N = 128,
# C = 64): in place, one launch per call, 32 x 32 tiles of 8 channels at fp32 (the recorded sweep,
# kernels/NOTES.md; only 16 programs of 128 x 128 exist), 64 x 64 of 2 at fp32x3, and at bf16
# 128 programs of 128 x 64 for 132 SMs.
TILES = {
    "fp32": TileTable("triangle", _FP32, base="permute_128x64x16_c1_w4_s3_ij",
                      rule=(("in_place_32x32x16_c8_w4_s3", _few_programs),), sizes=("N", "C")),
    "fp32x3": TileTable("triangle", _FP32X3, base="permute_128x64x32_c1_w4_s4",
                        rule=(("in_place_64x64x16_c2_w4_s3_per_channel", _few_programs),), sizes=("N", "C")),
    "bf16": TileTable("triangle", _BF16, base="permute_128x128x64_c1_w8_s3",
                      rule=(("permute_128x64x64_c1_w4_s4", _few_programs),), sizes=("N", "C")),
}
FIRST = TILES["fp32"]["in_place_32x32x32_c1_w4_s2_g1"]
INPUT_PRECISION = {"fp32": "ieee", "fp32x3": "tf32x3", "bf16": "ieee"}  # bf16 products: nothing to choose
_FLOAT = frozenset(ops.FLOAT)
LAYOUTS, STORES = ("in_place", "channel_major"), ("direct", "permute")


def _refuse_bad_config(c: dict) -> None:
    def no(why):
        raise MageInputError("triangle", "config", why)
    if c["LAYOUT"] not in LAYOUTS:
        no(f"LAYOUT must be one of {LAYOUTS}, got {c['LAYOUT']!r}")
    if c["STORE"] not in STORES:
        no(f"STORE must be one of {STORES}, got {c['STORE']!r}")
    if c["LAYOUT"] == "in_place" and c["STORE"] != "direct":
        no("the in-place kernel writes O directly: STORE must be 'direct'")
    if c["PER_CHANNEL"] and (c["LAYOUT"] != "in_place" or c["BLOCK_C"] not in (2, 4)):
        no(f"PER_CHANNEL needs LAYOUT 'in_place' and BLOCK_C 2 or 4, got {c['LAYOUT']!r}, {c['BLOCK_C']}")
    for key in ("BLOCK_I", "BLOCK_J", "BLOCK_K", "BLOCK_C"):
        if c[key] < 1 or c[key] & (c[key] - 1):
            no(f"{key} must be a power of two, got {c[key]}")


def _good(A, B) -> bool:
    """The spec's checks of a well-formed call in a few attribute reads: True only where
    ``SPEC.validate`` passes (a False sends the call to it, which names what is wrong)."""
    return (type(A) is torch.Tensor and type(B) is torch.Tensor and A.dtype in _FLOAT
            and B.dtype is A.dtype and A.ndim == 3 and A.shape[1] == A.shape[0] and B.shape == A.shape
            and A.device == B.device)


def _checked(A, B) -> None:
    """Every check, once per call: the common case (CUDA tensors that pass) in a few attribute reads,
    anything else through the full checks, which raise."""
    if not (_good(A, B) and A.is_cuda):
        SPEC.validate(A, B)
        common.on_device("triangle", {"A": A, "B": B})


def _plan(consts, launch, N, C, dtype, a_strides, b_strides):
    """The road of a call and what it launches with, from its tiles, sizes, precision and strides
    (memoised by ``TileTable.plan``). The output is contiguous [N, N, C]."""
    _refuse_bad_config(consts)
    precision = INPUT_PRECISION[dtype]
    shape = (N, N, C)
    offs_64 = max(common.reach(shape, a_strides), common.reach(shape, b_strides), N * N * C - 1) >= common.INT32_LIMIT
    if consts["LAYOUT"] == "channel_major":
        # the [C, N, N] scratch copies are contiguous with A's element count, whatever A's strides
        return "channel_major", (consts, launch, precision, offs_64 or N * N * C >= common.INT32_LIMIT)
    consts = {k: v for k, v in consts.items() if k not in ("LAYOUT", "STORE", "K_INNER")}
    grid = (common.cdiv(N, consts["BLOCK_I"]) * common.cdiv(N, consts["BLOCK_J"]), common.cdiv(C, consts["BLOCK_C"]))
    return "in_place", (grid, dict(OFFS_64=offs_64, PRECISION=precision, **consts, **launch))


def triangle(A, B, out=None, dtype=None, **config):
    """O_ijc = sum_k A_ikc B_jkc for A, B of shape [N, N, C], any strides. ``dtype``: 'fp32' (IEEE FMA
    products; the default for FP32 inputs), 'fp32x3' (three TF32 tensor-core products each) or 'bf16'
    (bf16 inputs and output, FP32 sums; the default for bf16 inputs); ``config`` overrides the tiles and
    the road (LAYOUT, STORE)."""
    _checked(A, B)
    dtype = dtype or ("bf16" if A.dtype is torch.bfloat16 else "fp32")
    if dtype not in INPUT_PRECISION:
        raise MageInputError("triangle", "dtype", f"must be one of {sorted(INPUT_PRECISION)}, got {dtype!r}")
    if (dtype == "bf16") != (A.dtype is torch.bfloat16):
        raise MageInputError("triangle", "A", f"has dtype {str(A.dtype).replace('torch.', '')}, which does "
                             f"not fit precision {dtype!r} (bf16 stores bfloat16, the others float32)")
    N, _, C = A.shape
    if out is None:
        out = A.new_empty((N, N, C))
    else:
        ops.check_out("triangle", out, (N, N, C), A.dtype, A.device)
    if N == 0 or C == 0:
        return out
    if A.dtype is torch.bfloat16 and common.interpreting():
        # Triton 3.6's interpreter multiplies bf16 dot operands as their raw 16-bit patterns. The FP32
        # product of two bf16 values is exact, so FP32 copies give the FP32 sums the tensor cores form;
        # the kernels still store into the bf16 output (the interpreter rounds toward zero there)
        A, B = A.float(), B.float()
    road_name, how = TILES[dtype].plan(_plan, (N, C), config, dtype, A.stride(), B.stride())
    if road_name == "channel_major":
        consts, launch, precision, offs_64 = how
        return road.channel_major(A, B, out, dict(consts), dict(launch), precision, offs_64)
    grid, kw = how
    common.launch(_triangle_kernel, grid, A, B, out, N, C, *A.stride(), *B.stride(), *out.stride(), **kw)
    return out


for _dtype, _tiles in TILES.items():
    register_kernel("triangle", triangle, _tiles, precision=_dtype, dtype=_dtype)


def launches(config: dict) -> int:
    """Launches one call makes with ``config``: the kernel's; on the channel-major road also the copy
    of A and B, and with the 'permute' epilogue the move of the channel-major result into O."""
    if config.get("LAYOUT") != "channel_major":
        return 1
    return 3 if config.get("STORE") == "permute" else 2


@torch.library.custom_op("mage::triton_triangle", mutates_args=())
def triangle_op(A: torch.Tensor, B: torch.Tensor, dtype: Optional[str] = None) -> torch.Tensor:
    """The kernel as a PyTorch operator, so torch.compile graphs can call it (``dtype``: as the launcher's,
    by default the inputs' own precision)."""
    return triangle(A, B, dtype=dtype)


@triangle_op.register_fake
def _(A, B, dtype=None):
    SPEC.validate(A, B)  # metadata only: a call with any 'meta' input lands here
    return A.new_empty(A.shape)
