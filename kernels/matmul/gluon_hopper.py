"""matmul's Gluon road on Hopper: fp32x3 and TF32 with the waits written by hand.

Why a third road: Triton's own Hopper road (``triton_hopper.py``) reaches about 1.8x cuBLAS FP32 at
fp32x3, because Triton waits for all of a k step's products before one dot reads another's result
(NOTES: "what the split road's drains cost"), and dropping those waits let the large product drift.
Gluon (``triton.experimental.gluon``) is the same compiler one level down: shared memory, mbarriers,
wgmma and its waits are written in the kernel. Here a k step issues three TF32 products, all async:

    big   = A_hi B_hi          (from zero: never chained over K on the tensor cores, which truncate)
    small = small + A_hi B_lo + A_lo B_hi   (its own chain: 2^-11 of the result, so its drift is negligible)

and waits with two groups still outstanding, so only ``big`` is waited for; it is added to the FP32 sum
by ordinary (IEEE) adds while the small products keep the tensor cores busy.

Three partitions (``gl.warp_specialize``): one warp issues the TMA loads of raw fp32 tiles of A [BM, BK]
and B [BK, BN] into a ring; four warps turn each raw stage into the TF32 parts, K-major (wgmma reads a
4-byte operand from shared memory only K-major, so B is transposed on the way, and no copy of B is
launched); eight warps (two warpgroups) issue the products and store C. In 'tf32' mode the split warps
only transpose B and the product chains as usual.

Not under the interpreter (Gluon has none): the CPU tests compile it for sm_90a (``resources``) and
check the host's argument handling; the GPU tests check it against float64.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_init, warpgroup_mma_wait)

from mage import facets
from mage.registry import register

from . import triton_kernel as plain
from .triton_hopper import k_major

MODES = ("fp32x3", "tf32")
# name -> (BLOCK_K, raw stages, split stages); BM = BN = 128 (two warpgroups of m64n128 products).
# Shared memory at BK 32: a raw stage 32 KB, a split stage 64 KB (x3) or 16 KB (tf32).
CONFIGS = {
    "fp32x3": {"k32_r3_s2": (32, 3, 2), "k32_r2_s2": (32, 2, 2), "k16_r4_s3": (16, 4, 3), "k16_r3_s2": (16, 3, 2)},
    "tf32": {"k32_r3_s2": (32, 3, 2), "k16_r3_s2": (16, 3, 2)},
}
BM = BN = 128
# the kernels' copies (a jit function reads only globals that are constexprs)
_BM, _BN = gl.constexpr(BM), gl.constexpr(BN)
_GROUP_M = gl.constexpr(8)
_SPLIT_ROWS = gl.constexpr(32)  # rows (of A) or columns (of B) the split warps take at a time: 32 floats a thread live
REGS = (24, 72)  # the loader's and the split warps' register ceilings; the MMA warps get the rest (208)


@gluon.jit
def _tile(t, tiles_m, tiles_n, GROUP: gl.constexpr):
    """Grouped order: GROUP rows of tiles, then one to the right (the programs at work share B in L2)."""
    per_group = GROUP * tiles_n
    first = (t // per_group) * GROUP
    rows = gl.minimum(tiles_m - first, GROUP)
    return first + (t % rows), (t % per_group) // rows


@gluon.jit
def _tf32_round(x):
    # round to nearest (ties away) to TF32's 10 mantissa bits, as Triton's tf32x3 does
    hi = gl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=True, pack=1)
    return hi.to(gl.float32, bitcast=True)


@gluon.jit
def _loader(a_desc, b_desc, raw_a, raw_b, bars, M, N, K, nprog):
    raw_full, raw_empty, _, _ = bars
    BK: gl.constexpr = raw_a.type.shape[2]
    RAW: gl.constexpr = raw_a.type.shape[0]
    tiles_m, tiles_n, k_steps = gl.cdiv(M, _BM), gl.cdiv(N, _BN), gl.cdiv(K, BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for t in range(gl.program_id(0), tiles_m * tiles_n, nprog):
        tm, tn = _tile(t, tiles_m, tiles_n, _GROUP_M)
        for ks in range(k_steps):
            s = it % RAW
            mbarrier.wait(raw_empty.index(s), ((it // RAW) & 1) ^ 1)  # a fresh barrier passes phase 1
            mbarrier.expect(raw_full.index(s), nbytes)
            # past M, N or K TMA fills zeros: no masks, and the zeros add nothing to the products
            tma.async_copy_global_to_shared(a_desc, [tm * _BM, ks * BK], raw_full.index(s), raw_a.index(s))
            tma.async_copy_global_to_shared(b_desc, [ks * BK, tn * _BN], raw_full.index(s), raw_b.index(s))
            it += 1


@gluon.jit
def _splitter(raw_a, raw_b, bars, a_hi, a_lo, bt_hi, bt_lo, M, N, K, nprog, X3: gl.constexpr):
    raw_full, raw_empty, split_ready, split_empty = bars
    BK: gl.constexpr = raw_a.type.shape[2]
    RAW: gl.constexpr = raw_a.type.shape[0]
    SPL: gl.constexpr = bt_hi.type.shape[0]
    W: gl.constexpr = gl.num_warps()
    # 4 consecutive k a thread on both sides: 16-byte reads of A's K-major rows and 16-byte writes of the
    # K-major parts; for B the lanes walk N, so the reads of its N-major raw tile do not conflict
    a_rows: gl.constexpr = gl.BlockedLayout([1, 4], [32 // (BK // 4), BK // 4], [W, 1], [1, 0])
    # warps along k too: with them along N (a layout 128 columns wide over a slice of 32) every warp repeated the
    # whole slice, four times the loads, roundings and stores a step (a review read it in the PTX)
    b_cols: gl.constexpr = gl.BlockedLayout([4, 1], [1, 32], [W, 1], [0, 1])
    tiles, k_steps = gl.cdiv(M, _BM) * gl.cdiv(N, _BN), gl.cdiv(K, BK)
    it = 0
    for t in range(gl.program_id(0), tiles, nprog):
        for ks in range(k_steps):
            rs, ss = it % RAW, it % SPL
            mbarrier.wait(raw_full.index(rs), (it // RAW) & 1)
            mbarrier.wait(split_empty.index(ss), ((it // SPL) & 1) ^ 1)
            if X3:
                for r in gl.static_range(0, _BM, _SPLIT_ROWS):
                    x = raw_a.index(rs).slice(r, _SPLIT_ROWS, dim=0).load(a_rows)
                    hi = _tf32_round(x)
                    a_hi.index(ss).slice(r, _SPLIT_ROWS, dim=0).store(hi)
                    # x - hi is exact in FP32; rounded to TF32 too (as Triton's tf32x3 does), not cut by the tensor cores
                    a_lo.index(ss).slice(r, _SPLIT_ROWS, dim=0).store(_tf32_round(x - hi))
            for c in gl.static_range(0, _BN, _SPLIT_ROWS):
                y = raw_b.index(rs).slice(c, _SPLIT_ROWS, dim=1).load(b_cols)  # [BK, SPLIT_ROWS]
                if X3:
                    hi = _tf32_round(y)
                    bt_hi.index(ss).slice(c, _SPLIT_ROWS, dim=0).permute((1, 0)).store(hi)
                    bt_lo.index(ss).slice(c, _SPLIT_ROWS, dim=0).permute((1, 0)).store(_tf32_round(y - hi))
                else:
                    bt_hi.index(ss).slice(c, _SPLIT_ROWS, dim=0).permute((1, 0)).store(y)
            # these stores are the generic proxy's; wgmma reads through the async proxy
            fence_async_shared()
            if X3:  # in 'tf32' A is read from the raw stage by the products: the MMA warps release it
                mbarrier.arrive(raw_empty.index(rs), count=1)
            mbarrier.arrive(split_ready.index(ss), count=1)
            it += 1


@gluon.jit
def _products(C, stride_cm, stride_cn, raw_a, bars, a_hi, a_lo, bt_hi, bt_lo, M, N, K, nprog,
              X3: gl.constexpr):
    raw_full, raw_empty, split_ready, split_empty = bars
    BK: gl.constexpr = raw_a.type.shape[2]
    RAW: gl.constexpr = raw_a.type.shape[0]
    SPL: gl.constexpr = bt_hi.type.shape[0]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, _BN, 8])
    tiles_m, tiles_n, k_steps = gl.cdiv(M, _BM), gl.cdiv(N, _BN), gl.cdiv(K, BK)
    zero = gl.zeros([_BM, _BN], gl.float32, acc_layout)
    it = 0
    for t in range(gl.program_id(0), tiles_m * tiles_n, nprog):
        tm, tn = _tile(t, tiles_m, tiles_n, _GROUP_M)
        acc = zero
        if X3:
            small = warpgroup_mma_init(zero)  # an async accumulator from the start: one type through the loop
            big = zero
            for ks in range(k_steps):
                ss = it % SPL
                mbarrier.wait(split_ready.index(ss), (it // SPL) & 1)
                b_hi = bt_hi.index(ss).permute((1, 0))
                big = warpgroup_mma(a_hi.index(ss), b_hi, big, use_acc=False, is_async=True)
                small = warpgroup_mma(a_hi.index(ss), bt_lo.index(ss).permute((1, 0)), small, is_async=True)
                small = warpgroup_mma(a_lo.index(ss), b_hi, small, is_async=True)
                big = warpgroup_mma_wait(num_outstanding=2, deps=[big])  # big only: the small ones run on
                acc = acc + big
                # every product of the step before is done (only this step's two may be in flight)
                mbarrier.arrive(split_empty.index((it + SPL - 1) % SPL), count=1, pred=ks > 0)
                it += 1
            small = warpgroup_mma_wait(num_outstanding=0, deps=[small])
            mbarrier.arrive(split_empty.index((it + SPL - 1) % SPL), count=1)
            acc = acc + small
        else:
            for ks in range(k_steps):
                ss, rs = it % SPL, it % RAW
                mbarrier.wait(raw_full.index(rs), (it // RAW) & 1)  # A straight from the raw stage
                mbarrier.wait(split_ready.index(ss), (it // SPL) & 1)
                acc = warpgroup_mma(raw_a.index(rs), bt_hi.index(ss).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
                mbarrier.arrive(split_empty.index((it + SPL - 1) % SPL), count=1, pred=ks > 0)
                mbarrier.arrive(raw_empty.index((it + RAW - 1) % RAW), count=1, pred=ks > 0)
                it += 1
            acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
            mbarrier.arrive(split_empty.index((it + SPL - 1) % SPL), count=1)
            mbarrier.arrive(raw_empty.index((it + RAW - 1) % RAW), count=1)
        # C from the products' registers by masked stores: a TMA store's staging tile (64 KB) does not fit
        # beside the rings at BK 32; the loads of the next tile are already in flight meanwhile
        # 64-bit row offsets: (M - 1) N reaches 2^31 at sizes a GPU holds (an 8 GB C)
        rows = (tm * _BM).to(gl.int64) + gl.arange(0, _BM, layout=gl.SliceLayout(1, acc_layout))
        cols = tn * _BN + gl.arange(0, _BN, layout=gl.SliceLayout(0, acc_layout))
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        gl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc, mask=mask)


@gluon.jit
def _gluon_gemm_kernel(a_desc, b_desc, C, M, N, K, stride_cm, stride_cn, nprog, X3: gl.constexpr,
                       RAW: gl.constexpr, SPL: gl.constexpr, SPLIT_WARPS: gl.constexpr, LOAD_REGS: gl.constexpr,
                       SPLIT_REGS: gl.constexpr):
    BK: gl.constexpr = a_desc.block_type.shape[1]
    f32: gl.constexpr = gl.float32
    bt_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([_BN, BK], f32)  # [BN, BK], K-major
    raw_a = gl.allocate_shared_memory(f32, [RAW, _BM, BK], a_desc.layout)
    raw_b = gl.allocate_shared_memory(f32, [RAW, BK, _BN], b_desc.layout)
    bt_hi = gl.allocate_shared_memory(f32, [SPL, _BN, BK], bt_layout)
    if X3:
        a_hi = gl.allocate_shared_memory(f32, [SPL, _BM, BK], a_desc.layout)
        a_lo = gl.allocate_shared_memory(f32, [SPL, _BM, BK], a_desc.layout)
        bt_lo = gl.allocate_shared_memory(f32, [SPL, _BN, BK], bt_layout)
    else:  # unused in 'tf32': the names still travel to the partitions
        a_hi, a_lo, bt_lo = raw_a, raw_a, bt_hi
    bar: gl.constexpr = mbarrier.MBarrierLayout()
    raw_full = gl.allocate_shared_memory(gl.int64, [RAW, 1], bar)
    raw_empty = gl.allocate_shared_memory(gl.int64, [RAW, 1], bar)
    split_ready = gl.allocate_shared_memory(gl.int64, [SPL, 1], bar)
    split_empty = gl.allocate_shared_memory(gl.int64, [SPL, 1], bar)
    for i in gl.static_range(RAW):
        mbarrier.init(raw_full.index(i), count=1)
        mbarrier.init(raw_empty.index(i), count=1)
    for i in gl.static_range(SPL):
        mbarrier.init(split_ready.index(i), count=1)
        mbarrier.init(split_empty.index(i), count=1)
    fence_async_shared()
    bars = (raw_full, raw_empty, split_ready, split_empty)
    # the argument tuples are written in the call: a tuple bound to a name first turns its constexprs into tensors
    gl.warp_specialize([
        (_products, (C, stride_cm, stride_cn, raw_a, bars, a_hi, a_lo, bt_hi, bt_lo, M, N, K, nprog, X3)),
        (_loader, (a_desc, b_desc, raw_a, raw_b, bars, M, N, K, nprog)),
        (_splitter, (raw_a, raw_b, bars, a_hi, a_lo, bt_hi, bt_lo, M, N, K, nprog, X3)),
    ], [1, SPLIT_WARPS], [LOAD_REGS, SPLIT_REGS])


def available(device=None) -> bool:
    """An sm_90 card; never the interpreter (Gluon has none)."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability(device) == (9, 0)


def _layout(block):
    return gl.NVMMASharedLayout.get_default_for(list(block), gl.float32)


def gemm(A, B, *, precision="fp32x3", out=None, config=None, num_sms=None):
    """out = A @ B (FP32 A [M, K] and B [K, N]); ``precision`` 'fp32x3' or 'tf32'; ``config`` a name in
    CONFIGS[precision] (its first by default). The caller has checked shapes, dtypes and devices."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    table = CONFIGS[precision]
    bk, raw, spl = table[config or next(iter(table))]
    (M, K), N = A.shape, B.shape[1]
    if out is None:
        out = A.new_empty((M, N))
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    a = k_major(A, M, K, transpose=False)  # TMA: 16-byte-aligned rows, else a row-padded copy
    b = k_major(B, K, N, transpose=False)
    a_desc = TensorDescriptor.from_tensor(a, [BM, bk], _layout((BM, bk)))
    b_desc = TensorDescriptor.from_tensor(b, [bk, BN], _layout((bk, BN)))
    sms = num_sms or torch.cuda.get_device_properties(A.device).multi_processor_count
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    _gluon_gemm_kernel[(min(sms, tiles),)](
        a_desc, b_desc, out, M, N, K, out.stride(0), out.stride(1), min(sms, tiles),
        X3=precision == "fp32x3", RAW=raw, SPL=spl, SPLIT_WARPS=4, LOAD_REGS=REGS[0], SPLIT_REGS=REGS[1],
        num_warps=8)
    return out


def matmul(A, B, out=None, dtype=None, config=None):
    """C = A @ B on the Gluon road: ``dtype`` 'fp32x3' (the default) or 'tf32'; anything else is refused."""
    dtype, out = plain.entry(A, B, out, dtype, "fp32x3", MODES)
    return gemm(A, B, precision=dtype, out=out, config=config)


def resources(precision: str, config: str) -> dict:
    """One config compiled for sm_90a here, as the JIT specialises a launch at 4096^3 (C's column stride 1 a
    constant, the other sizes multiples of 16): ``kernels._triton.sm90.gluon_resources``."""
    from kernels._triton import sm90
    bk, raw, spl = CONFIGS[precision][config]
    desc = lambda block: f"tensordesc<fp32[{block[0]}, {block[1]}],{_layout(block)!r}>"  # noqa: E731
    cx = dict(stride_cn=1, X3=precision == "fp32x3", RAW=raw, SPL=spl, SPLIT_WARPS=4, LOAD_REGS=REGS[0],
              SPLIT_REGS=REGS[1])
    sig = dict(a_desc=desc((BM, bk)), b_desc=desc((bk, BN)), C="*fp32", M="i32", N="i32", K="i32", stride_cm="i32",
               nprog="i32", **{k: "constexpr" for k in cx})
    sig = {a: sig[a] for a in _gluon_gemm_kernel.arg_names}  # the kernel's order: attributes go by index
    return sm90.gluon_resources(_gluon_gemm_kernel, sig, cx, aligned=("C", "M", "N", "K", "stride_cm"), num_warps=8,
                                ptx_counts=("cvt.rna.tf32.f32",))


# A column of its own beside 'triton_hopper' (same family): the book shows which road gave each row.
NAME = "gluon_hopper"
facets.declare_column(NAME, label="Triton Gluon (Hopper: split warps)", order=13, color="#B8860B")


def _unavailable():
    return None if available() else "needs an sm_90 (Hopper) GPU; Gluon has no CPU interpreter"


for _dtype in MODES:
    def _fn(A, B, out=None, _dtype=_dtype):
        return matmul(A, B, out=out, dtype=_dtype)

    _fn.__name__ = f"matmul_{NAME}_{_dtype}"
    register("matmul", NAME, dtype=_dtype, family="triton", interpret=False, needs_cuda=True,
             available=_unavailable, config=dict(zip(("BLOCK_K", "RAW_STAGES", "SPLIT_STAGES"),
                                                     next(iter(CONFIGS[_dtype].values()))), BLOCK_M=BM, BLOCK_N=BN))(_fn)
