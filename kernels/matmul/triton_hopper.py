"""matmul's Hopper road: a persistent GEMM whose operands arrive through tensor descriptors (TMA), so
the main loop is TMA loads into shared memory and tl.dot, which on sm_90 lowers to wgmma.

Why a second road: the plain kernel (``triton_kernel.py``) loads tiles through pointers (cp.async) and
launches one program per output tile; at 4096^3 that is a few waves of programs with a prologue and an
epilogue each. Here grid = min(#SMs, #tiles): each program walks tiles pid, pid + NUM_SMS, ... in grouped
order, so one program's epilogue overlaps its next tile's first loads, and TMA moves a whole tile per
instruction (no address arithmetic in registers, which the fp32x3 split needs for its operands).

Layouts. wgmma reads a 4-byte operand from shared memory only K-major, so the TF32 and fp32x3 roads read
B through a descriptor over B^T ([N, K], K contiguous) and transpose the loaded tile (``.T``, a view of
the shared-memory tile, not a copy). A caller that already holds W [N, K] (a Linear's weight) passes it
with ``b_nk=True`` and nothing is copied; a [K, N] B is copied K-major once per call (a launch, timed with
the call). bf16 wgmma reads B N-major too, so bf16 reads a [K, N] B as it comes.

Descriptors are built on the host (``TensorDescriptor``) and passed as kernel arguments: that needs no
device allocator and also runs in Triton's CPU interpreter. TMA asks for a 16-byte-aligned base and
16-byte-aligned row strides: an operand that has neither (K not a multiple of 4 at FP32, say) is copied
into a buffer whose rows are padded (the padding is never read: the descriptor's shape stops at K and TMA
fills what lies past the edge with zeros). Edges in M and N need no masks for the same reason; the
output is stored through a descriptor where it is aligned (TMA clips the edge), else by masked stores.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from mage import facets
from mage.errors import MageInputError
from mage.registry import Impl, register

from kernels._triton import common
from kernels._triton.tiles import grouped_tile

from . import _split
from . import triton_kernel as plain

PRECISION = {"fp32x3": "tf32x3", "tf32": "tf32", "bf16": "ieee"}


# the tile tables live in hopper_tiles.py; TILES and _cfg stay reachable here, where callers look
from .hopper_tiles import TILES, _cfg  # noqa: E402,F401


# <kernel>
@triton.jit
def _hopper_gemm_kernel(
    a_desc, b_desc, c_desc,  # descriptors: A [M, K]; B [N, K] (B_NK) or [K, N]; C [M, N] (None: plain stores)
    a_lo_desc, b_lo_desc,  # with SPLIT: the low TF32 parts of A and B (a_desc and b_desc hold the high)
    C, Bias, Res,  # output pointer (plain stores), bias [N] and Res [M, N] (read where the epilogue asks)
    M, N, K, stride_cm, stride_cn, stride_rm, stride_rn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # tile rows walked before moving right (the programs at work share B's panels in L2)
    NUM_SMS: tl.constexpr,  # programs launched: each walks tiles pid, pid + NUM_SMS, ...
    PRECISION: tl.constexpr,  # "tf32x3", "tf32", or "ieee" (bf16 operands)
    B_NK: tl.constexpr,  # 1: b_desc is over B^T [N, K] (K-major, what wgmma needs for 4-byte types)
    BIAS: tl.constexpr, GELU: tl.constexpr,  # add bias[N]; exact (erf) GELU after it
    EPILOGUE: tl.constexpr,  # 0 nothing, 1 add Res, 2 multiply by sigmoid(Res)
    TMA_STORE: tl.constexpr,  # store through c_desc (aligned C) rather than masked pointer stores
    SUBTILE: tl.constexpr,  # TMA store in two halves of BLOCK_N / 2 (fewer live registers at the store)
    FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr,  # the tile loop's compiler options (off unless a config asks)
    SPLIT: tl.constexpr,  # fp32x3 from operands split before the GEMM: three TF32 products of loaded tiles
    A_KM: tl.constexpr,  # 1: a_desc is over A^T [K, M] (M-major): each tile transposed on the way to the dot
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(pid, tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPEC):
        tile_m, tile_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        om = tile_m * BLOCK_M
        on = tile_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            if A_KM:
                a = a_desc.load([ks * BLOCK_K, om]).T
            else:
                a = a_desc.load([om, ks * BLOCK_K])  # past K (or M) TMA reads zeros: no masks
            if B_NK:
                b = b_desc.load([on, ks * BLOCK_K]).T
            else:
                b = b_desc.load([ks * BLOCK_K, on])
            if SPLIT:
                # each k step's three products summed on the tensor cores from zero, the small ones first,
                # then added to the running sum on the FP32 units, as Triton's own tf32x3 does. The tensor
                # cores' accumulation rounds toward zero (Fasi et al. 2021): chained over all of K, the sum
                # drifted in one direction, 2.9e-5 at 4096^3 and 5.7e-5 at 8192^3 with the small products in
                # the chain, 9.6e-6 and 1.9e-5 in a chain of their own, growing with K both times.
                # The drains this costs: Triton waits for the tensor cores before a dot reads another dot's
                # result in the same k step, three times a step here. Each product in its own loop-carried
                # chain (no drain; probe modes 2 and 3) ran 2.26x / 2.36x cuBLAS FP32 against 1.80x / 1.76x on an
                # H100, at that drift's error (data/h100/hopper/sweep_splitmodes_15e6783.csv). Mode 4 (commit
                # fc4570c), the small products as one K-concatenated dot in a chain and one wait a step, ran
                # 1.32x-1.65x: a wait that empties the tensor cores' queue costs as a drain does (NOTES)
                step = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                step = tl.dot(a_lo_desc.load([om, ks * BLOCK_K]), b, step, input_precision="tf32")
                step = tl.dot(a, b_lo_desc.load([on, ks * BLOCK_K]).T, step, input_precision="tf32")
                acc += tl.dot(a, b, step, input_precision="tf32")
            else:
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
        rows = om + tl.arange(0, BLOCK_M)
        cols = on + tl.arange(0, BLOCK_N)
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        if BIAS:
            acc += tl.load(Bias + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        if GELU:
            acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))  # erf(z / sqrt 2)
        if EPILOGUE != 0:
            r = tl.load(Res + rows[:, None] * stride_rm + cols[None, :] * stride_rn, mask=mask, other=0.0)
            if EPILOGUE == 1:
                acc += r.to(tl.float32)
            else:
                acc *= tl.sigmoid(r.to(tl.float32))
        out = acc.to(C.dtype.element_ty)
        if TMA_STORE:
            if SUBTILE:  # [BM, BN] -> [BM, 2, BN/2] -> two [BM, BN/2] halves, each its own TMA store
                lo, hi = tl.split(tl.permute(tl.reshape(out, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
                c_desc.store([om, on], lo)
                c_desc.store([om, on + BLOCK_N // 2], hi)
            else:
                c_desc.store([om, on], out)  # TMA clips the rows and columns past M and N
        else:
            tl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn, out, mask=mask)
# </kernel>


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def programs(device, tiles: int, per_sm: int = 1) -> int:
    """min(per_sm * #SMs, #tiles): ``per_sm`` programs an SM (1 unless a config's registers and shared memory
    let two share an SM, so that one's tensor-core work fills the other's waits), none idle at small sizes.
    The interpreter (no SMs; it runs programs one after another) gets 4, so each program walks several tiles."""
    sms = per_sm * _sm_count(device.index or 0) if device.type == "cuda" else 4
    return max(1, min(sms, tiles))


def available(device=None) -> bool:
    """Whether the Hopper road can run here: an sm_90 card (TMA and wgmma), or the interpreter."""
    if common.interpreting():
        return True
    return torch.cuda.is_available() and torch.cuda.get_device_capability(device) == (9, 0)


def _tma_ready(t) -> bool:
    """What a descriptor needs: last stride 1, other strides and the base 16-byte aligned."""
    es = t.element_size()
    return t.stride(-1) == 1 and (t.stride(0) * es) % 16 == 0 and t.data_ptr() % 16 == 0


def k_major(t, rows: int, cols: int, transpose: bool):
    """``t`` (or ``t.t()``) as a [rows, cols] view with cols contiguous and 16-byte-aligned rows:
    the tensor itself where it already is, else a copy into row-padded storage."""
    v = t.t() if transpose else t
    return v if _tma_ready(v) else _split.k_major(t, rows, cols, transpose)


def gemm(A, B, *, precision, b_nk=False, out=None, bias=None, gelu=False, residual=None, gate=None,
         num_sms=None, **config):
    """out = act(A @ B + bias) (+ residual, or * sigmoid(gate)); B is [K, N], or [N, K] with ``b_nk``
    (a Linear's W). ``precision``: 'fp32x3', 'tf32' or 'bf16' (bf16 operands); all accumulate in FP32.
    ``config``: overrides of the table's tile choice. The caller has checked shapes, dtypes and devices."""
    if precision not in PRECISION:
        raise MageInputError("matmul_hopper", "precision", f"must be one of {sorted(PRECISION)}, got {precision!r}")
    if residual is not None and gate is not None:
        raise MageInputError("matmul_hopper", "gate", "a residual or a gate, not both")
    (M, K), N = A.shape, (B.shape[0] if b_nk else B.shape[1])
    if out is None:
        out = A.new_empty((M, N))
    if M == 0 or N == 0:
        return out
    if K == 0:
        out.zero_()
        if bias is None and residual is None and gate is None and not gelu:
            return out
        A, B, K = A.new_zeros((M, 1)), B.new_zeros((N, 1) if b_nk else (1, N)), 1  # epilogue over zeros
    if bias is not None:
        bias = bias.contiguous()  # the kernel indexes it as bias[n]; a strided view is copied first
    cfg = TILES[precision].choose(dict(M=M, K=K, N=N), config)
    consts, launch = common.split(cfg)
    bm, bn, bk = consts["BLOCK_M"], consts["BLOCK_N"], consts["BLOCK_K"]
    if precision == "bf16" and common.interpreting():
        # Triton 3.6's interpreter multiplies bf16 tiles as raw 16-bit patterns; a bf16 x bf16 product is
        # exact in FP32, so FP32 copies give the sums the tensor cores form (checks indexing on the CPU)
        A, B = A.float(), B.float()
    split = bool(consts.pop("SPLIT", 0)) and precision == "fp32x3"
    per_sm = int(consts.pop("PER_SM", 1))
    swap = bool(consts.pop("SWAP_AB", 0))
    if swap and not split and not b_nk and A.element_size() == 4 and bias is None and res_none(residual, gate) \
            and not gelu and _tma_ready(B) and _tma_ready(A):
        return _swapped(A, B, out, M, K, N, precision, consts, launch, num_sms or programs(
            A.device, common.cdiv(N, bm) * common.cdiv(M, bn), per_sm))
    a_lo_desc = b_lo_desc = None
    # B^T [N, K] K-major for 4-byte types (or where a bf16 [K, N] cannot be read as it is)
    as_is = bool(consts.pop("B_AS_IS", 0))  # a 4-byte [K, N] B read in place, transposed in shared memory
    nk = b_nk or (A.element_size() == 4 and not as_is) or not _tma_ready(B)
    if split:  # the high parts take A's and B's places; the products are plain TF32
        (a, a_lo), (b, b_lo) = _split.split(A, M, K, False), _split.split(B, N, K, not b_nk)
        a_lo_desc = TensorDescriptor(a_lo, [M, K], [a_lo.stride(0), 1], [bm, bk])
        b_lo_desc = TensorDescriptor(b_lo, [N, K], [b_lo.stride(0), 1], [bn, bk])
    else:
        a = k_major(A, M, K, transpose=False)
        b = k_major(B, N, K, transpose=not b_nk) if nk else B
    if nk:
        b_desc = TensorDescriptor(b, [N, K], [b.stride(0), 1], [bn, bk])
    else:
        b_desc = TensorDescriptor(B, [K, N], [B.stride(0), 1], [bk, bn])
    a_desc = TensorDescriptor(a, [M, K], [a.stride(0), 1], [bm, bk])
    subtile, flatten = consts.pop("EPILOGUE_SUBTILE", 0), bool(consts.pop("FLATTEN", 0))
    c_desc = None
    if consts.pop("TMA_STORE", 1):
        if _tma_ready(out) and out.dtype == A.dtype:
            c_desc = TensorDescriptor(out, [M, N], [out.stride(0), 1], [bm, bn // 2 if subtile else bn])
        else:  # plain stores instead: their staging tile (the whole C tile, in shared memory) fits a config sized
            flatten = False  # for the TMA store's only beside an unflattened loop (262 KB against 227: NOTES)
    res = residual if residual is not None else gate
    tiles = common.cdiv(M, bm) * common.cdiv(N, bn)
    nsm = num_sms or programs(A.device, tiles, per_sm)
    _hopper_gemm_kernel[(nsm,)](
        a_desc, b_desc, c_desc, a_lo_desc, b_lo_desc, out, bias if bias is not None else out, res if res is not None else out,
        M, N, K, out.stride(0), out.stride(1), *(res.stride() if res is not None else (0, 0)),
        NUM_SMS=nsm, PRECISION="tf32" if split else PRECISION[precision], B_NK=int(nk), BIAS=bias is not None, GELU=bool(gelu),
        EPILOGUE=1 if residual is not None else 2 if gate is not None else 0,
        TMA_STORE=c_desc is not None, SUBTILE=bool(subtile and c_desc is not None),
        FLATTEN=flatten, WARP_SPEC=bool(consts.pop("WARP_SPEC", 0)), SPLIT=split, A_KM=False,
        **consts, **launch)
    return out


def res_none(residual, gate) -> bool:
    return residual is None and gate is None


def _swapped(A, B, out, M, K, N, precision, consts, launch, num_sms):
    """C^T = B^T A^T ('_sw' configs: a 4-byte [K, N] B, no epilogue): B's tiles, loaded as they lie and
    transposed in registers, become the dot's first operand, which wgmma may read from registers, and A,
    K-major already, the second, read from shared memory; no copy of B and no transposing pass through
    shared memory. C's tile is stored transposed through pointers."""
    bm, bn, bk = consts["BLOCK_M"], consts["BLOCK_N"], consts["BLOCK_K"]
    consts = {k: v for k, v in consts.items() if k not in ("TMA_STORE", "EPILOGUE_SUBTILE", "B_AS_IS")}
    a_desc = TensorDescriptor(B, [K, N], [B.stride(0), 1], [bk, bm])  # the product's first operand: B^T [N, K]
    b_desc = TensorDescriptor(A, [M, K], [A.stride(0), 1], [bn, bk])  # its second, K-major: A [M, K]
    nsm = num_sms
    _hopper_gemm_kernel[(nsm,)](
        a_desc, b_desc, None, None, None, out, out, out, N, M, K, out.stride(1), out.stride(0), 0, 0,
        NUM_SMS=nsm, PRECISION=PRECISION[precision], B_NK=1, BIAS=False, GELU=False, EPILOGUE=0, TMA_STORE=False,
        SUBTILE=False, FLATTEN=bool(consts.pop("FLATTEN", 0)), WARP_SPEC=bool(consts.pop("WARP_SPEC", 0)),
        SPLIT=False, A_KM=True, **consts, **launch)
    return out


def matmul(A, B, out=None, dtype=None, **config):
    """C = A @ B on the Hopper road. ``dtype``: 'fp32x3' (the default for FP32 inputs), 'tf32' or 'bf16'.
    IEEE FP32 has no tensor-core road: 'fp32' is refused here (the plain road serves it)."""
    dtype, out = plain.entry(A, B, out, dtype, "fp32x3", PRECISION)
    return gemm(A, B, precision=dtype, out=out, **config)


# The road as a column of its own, 'triton_hopper' (same family as 'triton'): the plain road keeps the
# 'triton' column on every card, and a figure shows both on the H200.
NAME = "triton_hopper"
facets.declare_column(NAME, label="Triton (Hopper: TMA, persistent)", order=12, color="#F5C710")


def _unavailable():
    return None if available() else "needs an sm_90 (Hopper) GPU, or TRITON_INTERPRET=1"


def _variant(dtype, **config) -> Impl:
    full = TILES[dtype].complete(config)
    return Impl(op="matmul", name=NAME, fn=functools.partial(matmul, dtype=dtype, **full), dtype=dtype,
                family="triton", needs_cuda=True, interpret=dtype != "bf16", available=_unavailable,
                config=dict(full))


for _dtype, _tiles in TILES.items():
    def _fn(A, B, out=None, _dtype=_dtype):
        return matmul(A, B, out=out, dtype=_dtype)

    _fn.__name__ = f"matmul_{NAME}_{_dtype}"
    # bf16 runs under the interpreter through FP32 copies (see ``gemm``), but the column is measured
    # on the GPU only, as the plain road's bf16 row
    register("matmul", NAME, dtype=_dtype, family="triton", interpret=_dtype != "bf16", needs_cuda=True,
             available=_unavailable, config_for=_tiles.choose, sweep=_tiles.sweep_configs(),
             variant=functools.partial(_variant, _dtype))(_fn)
