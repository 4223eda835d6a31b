"""The Hopper road's 4-byte configs (TF32, fp32x3, and fp32x3 split once) compiled for sm_90a on the CPU
(``kernels/_triton/sm90.py``): none spills to local memory and each fits a block's shared memory. The split keeps two
accumulators (a k step's three products, and the running sum), so tiles that fit the other roads may not fit here."""
from __future__ import annotations

import pytest

from kernels._triton import sm90
from kernels.matmul import triton_hopper as th

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sm90.available(), reason="Triton's wheel has no cuobjdump")]
SPLIT = [n for n, c in th.TILES["fp32x3"].configs.items() if c.get("SPLIT")]


def _usage(cfg: dict, precision: str = "fp32x3", fallback: bool = False, epilogue: int = 0) -> dict:
    """The config compiled as the launcher runs it: split operands multiply as plain TF32; B K-major (after
    its copy, or split) unless an '_nc' config reads it as [K, N]; a '_sw' config's first operand is B as
    [K, N] (transposed in registers), its second A K-major, and C stored by pointer. ``epilogue``: none (0), or
    with a bias the kernel's EPILOGUE code (1 a residual, 2 a gate), as a block calls it."""
    split, swap = bool(cfg["SPLIT"]), bool(cfg.get("SWAP_AB"))
    b_nk = 0 if cfg["B_AS_IS"] and not split and not swap else 1
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    desc = lambda r, c: f"tensordesc<fp32[{r}, {c}]>"  # noqa: E731
    sig = dict(a_desc=desc(bk, bm) if swap else desc(bm, bk), b_desc=desc(bn, bk) if b_nk else desc(bk, bn), a_lo_desc=desc(bm, bk),
               b_lo_desc=desc(bn, bk), c_desc=desc(bm, bn // 2 if cfg["EPILOGUE_SUBTILE"] else bn), C="*fp32",
               Bias="*fp32", Res="*fp32", **{k: "i32" for k in ("M", "N", "K", "stride_cm", "stride_cn", "stride_rm", "stride_rn")})
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], NUM_SMS=132,
                  PRECISION="tf32" if split else th.PRECISION[precision], B_NK=b_nk, BIAS=bool(epilogue), GELU=False,
                  EPILOGUE=epilogue, TMA_STORE=bool(cfg["TMA_STORE"]) and not swap,
                  SUBTILE=bool(cfg["EPILOGUE_SUBTILE"]) and not swap, FLATTEN=bool(cfg["FLATTEN"]),
                  WARP_SPEC=bool(cfg["WARP_SPEC"]), SPLIT=split, A_KM=swap)
    # the JIT specialises an integer argument equal to 1 as a constant: the output's unit column stride. With
    # it known, plain stores go out vectorised through a staging tile in shared memory, which a flattened loop
    # cannot overlay on the pipeline's buffers (unspecialised here, 128x256 '_fl' configs compiled at 196 KB and
    # failed to launch on the GPU, needing 320 KB)
    consts["stride_cn"] = 1
    aligned = ("C", "Bias", "Res", "M", "N", "K", "stride_cm")
    if fallback:
        consts.update(TMA_STORE=False, SUBTILE=False, FLATTEN=False)
        aligned = ("C", "Bias", "Res")
    if swap:  # C stored transposed: its row stride is the output's column stride, 1, which the JIT specialises
        consts["stride_cm"] = 1
        del consts["stride_cn"]
        aligned = ("C", "Bias", "Res", "M", "N", "K", "stride_cn")
    sig.update({k: "constexpr" for k in consts})
    sig = {a: sig[a] for a in th._hopper_gemm_kernel.arg_names}  # the kernel's order: alignment is by index
    return sm90.resources("kernels.matmul.triton_hopper:_hopper_gemm_kernel", sig, consts, cfg["num_warps"],
                          cfg["num_stages"], aligned=aligned)


def test_there_are_split_configs_to_sweep():
    assert len(SPLIT) >= 4


@pytest.mark.parametrize("name", SPLIT)
def test_split_configs_neither_spill_nor_overflow_shared_memory(name):
    u = _usage(th.TILES["fp32x3"][name])
    assert u["stack"] == 0 and u["shared"] <= sm90.SHARED_LIMIT, (name, u)


UNSPLIT = [(p, n) for p in ("tf32", "fp32x3") for n, c in th.TILES[p].configs.items() if not c.get("SPLIT")]


@pytest.mark.parametrize("precision,name", UNSPLIT)
def test_four_byte_configs_neither_spill_nor_overflow_shared_memory(precision, name):
    """Every TF32 and fp32x3 config as the launcher runs it: B K-major after its copy, or as [K, N] for
    the '_nc' configs, whose B tile is transposed on chip and must still fit a block and its registers."""
    u = _usage(th.TILES[precision][name], precision)
    assert u["stack"] == 0 and u["shared"] <= sm90.SHARED_LIMIT, (name, u)


FALLBACK = [(p, n) for p in ("tf32", "fp32x3") for n, c in th.TILES[p].configs.items()
            if c["TMA_STORE"] and not c.get("SWAP_AB")]


@pytest.mark.parametrize("precision,name", FALLBACK)
def test_tma_store_configs_fit_their_plain_store_fallback(precision, name):
    """Where C's rows are not 16-byte aligned the road stores by pointer, through a staging tile of all of C's
    tile in shared memory. Two flattened configs asked for 262 and 279 KB that way and failed to launch on the
    GPU at M = 257, N = 255; the launcher now unflattens the loop there, and this compiles what it runs."""
    u = _usage(th.TILES[precision][name], precision, fallback=True)
    assert u["stack"] == 0 and u["shared"] <= sm90.SHARED_LIMIT, (name, u)


@pytest.mark.parametrize("parts", [False, True])
def test_the_transposing_copy_turns_its_tile_around_in_shared_memory(parts):
    """B's K-major copy (and the split) read B^T with a unit row stride, which the JIT specialises: the
    load follows B's rows, the store B^T's, and the two layouts meet in shared memory (a 64x64 FP32 tile,
    16 KB), not in strided global reads; no spills."""
    sig = dict(X="*fp32", HI="*fp32", LO="*fp32", R="i32", C="i32", sx_r="constexpr", sx_c="i32", ld="i32",
               BLOCK="constexpr", OFFS_64="constexpr", PARTS="constexpr")
    u = sm90.resources("kernels.matmul._split:_split_kernel", sig, dict(sx_r=1, BLOCK=64, OFFS_64=False, PARTS=parts),
                       4, 1, aligned=("X", "HI", "LO", "R", "C", "sx_c", "ld"))
    assert u["stack"] == 0 and u["shared"] >= 64 * 64 * 4, u


SHARED_MANY = 228 * 1024  # an SM's shared memory, which its blocks share (each with 1 KB the system keeps)
MANY = [(p, n) for p in ("tf32", "fp32x3") for n, c in th.TILES[p].configs.items() if c.get("PER_SM", 1) > 1]


@pytest.mark.parametrize("precision,name", MANY)
def test_configs_of_several_programs_an_sm_fit_that_many(precision, name):
    """An '_o2' config launches two programs an SM; if their registers (allocated 8 a thread at a time) or
    shared memory did not fit twice, the second would wait for the first and the config would be the '_o1'
    one with twice the tail."""
    cfg = th.TILES[precision][name]
    u = _usage(cfg, precision)
    regs, threads, many = -(-u["registers"] // 8) * 8, 32 * cfg["num_warps"], cfg["PER_SM"]
    assert u["stack"] == 0 and many * regs * threads <= 65536 and many * (u["shared"] + 1024) <= SHARED_MANY, (name, u)
