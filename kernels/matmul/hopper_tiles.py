"""The Hopper road's tile tables (``triton_hopper``): one config per name for each precision, the base
each precision starts from, and why each entry is there. Shared memory is 227 KB a block on sm_90."""
from __future__ import annotations

from kernels._triton import TileTable


def _cfg(bm, bn, bk, warps, stages, group=8, store=1, subtile=0, flatten=0, ws=0, split=0, nocopy=0, swap=0,
         per_sm=1):
    """One config: tiles, warps, stages, GROUP_M, and the switches (TMA store of C, its two-half
    subtile, the tile loop's flatten and warp-specialize options; the last three risky, off by default;
    fp32x3's operands split once before the GEMM, ``_split``; a 4-byte B read as [K, N] with no copy, ``_nc``;
    the product taken as C^T = B^T A^T with B's tiles the register operand, ``_sw``; programs an SM, ``_o2``)."""
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps, num_stages=stages,
                TMA_STORE=store, EPILOGUE_SUBTILE=subtile, FLATTEN=flatten, WARP_SPEC=ws, SPLIT=split, B_AS_IS=nocopy,
                SWAP_AB=swap, PER_SM=per_sm)


# Names: tiles, warps (w), stages (s); suffixes: '_ps' plain masked stores instead of the TMA store, '_sub' the
# TMA store in two halves, '_fl' a flattened tile loop, '_ws' warp specialization (Triton 3.6 compiles it to the
# same PTX on sm_90: kernels/NOTES.md), '_g16' GROUP_M 16, and last of all '_o2' ('_o3') for two (three)
# programs an SM. Shared memory (227 KB a block): stages * (BM + BN) * BK * bytes for the operands, plus BM * BN
# * bytes for a TMA store's staging tile (half with '_sub'). At 4 bytes 128x128x32 is 32 KB a stage (4 stages +
# 64 KB of C: 192 KB), 128x256x32 48 KB (3 stages: 144 KB, so C must be stored plainly or in halves), 128x128x64
# 64 KB (3 stages, plain stores). At bf16 128x256x64 is 48 KB a stage, 3 stages + 64 KB of C: 208 KB.
_TF32 = {
    "m128_n128_k32_w8_s4": _cfg(128, 128, 32, 8, 4),
    "m128_n128_k32_w4_s4": _cfg(128, 128, 32, 4, 4),
    "m128_n128_k32_w8_s3": _cfg(128, 128, 32, 8, 3),
    "m128_n128_k64_w8_s3_ps": _cfg(128, 128, 64, 8, 3, store=0),
    "m128_n256_k32_w8_s3_ps": _cfg(128, 256, 32, 8, 3, store=0),
    "m128_n256_k32_w8_s3_sub": _cfg(128, 256, 32, 8, 3, subtile=1),
    "m256_n128_k32_w8_s3_ps": _cfg(256, 128, 32, 8, 3, store=0),
    "m128_n128_k32_w8_s4_g16": _cfg(128, 128, 32, 8, 4, group=16),
    "m128_n128_k32_w8_s4_fl": _cfg(128, 128, 32, 8, 4, flatten=1),
    # '_nc': B read as it comes, [K, N], with no K-major copy first (a launch and 2 K N 4 bytes of traffic a
    # call). TF32 wgmma still needs B K-major in shared memory: compiled for sm_90a, Triton keeps wgmma and
    # transposes each B stage through registers (32 st.shared and 8 more ld.shared a K step at 128x256x32).
    # The copy is about half of the gap to cuBLAS at 4096^3 (kernels/NOTES.md); unmeasured
    "m128_n256_k32_w8_s3_ps_nc": _cfg(128, 256, 32, 8, 3, store=0, nocopy=1),
    "m128_n128_k32_w8_s4_nc": _cfg(128, 128, 32, 8, 4, nocopy=1),
    # '_sw': C^T = B^T A^T, so a [K, N] B is the dot's first operand, which wgmma may take from registers:
    # its tiles go from shared memory to registers transposed, with no store back (where a [K, N] B comes
    # with no epilogue; elsewhere the base road). Slow on an H100: 0.18 (128x128) and 0.33-0.38 (128x256) of
    # cuBLAS TF32 (data/h100/hopper/sweep_8667fe7.csv, sweep_sub_50b30d0.csv)
    "m128_n128_k32_w8_s4_sw": _cfg(128, 128, 32, 8, 4, swap=1),
    "m128_n256_k32_w8_s3_sw": _cfg(128, 256, 32, 8, 3, swap=1),
    # longer K steps and deeper pipelines for the 128x256 tile (96 KB a stage at BLOCK_K 64, 48 KB at 32):
    # fewer waits per output tile, the lever the B-K-major kernel alone has left (0.81 of cuBLAS at 4096^3)
    "m128_n256_k64_w8_s2_ps": _cfg(128, 256, 64, 8, 2, store=0),
    "m128_n256_k32_w8_s4_ps": _cfg(128, 256, 32, 8, 4, store=0),
    "m128_n256_k32_w8_s4_ps_nc": _cfg(128, 256, 32, 8, 4, store=0, nocopy=1),
    # (128x256 flattened, '_ps_fl' at 3 and 4 stages, needed 272-320 KB of shared memory: a flattened loop's
    # store staging tile cannot overlay the pipeline's buffers. They left the table; kernels/NOTES.md)
    # flattened with the TMA store in halves (a 64 KB staging tile): 213 KB, fits. On an H100 no steadier than
    # the spread: 0.82 / 0.95 of cuBLAS TF32 against 0.81 / 0.93 for '_s3_sub' (4096^3 / 8192^3), and with B
    # K-major 0.85 / 0.93 against 0.89 / 0.98 (data/h100/hopper/sweep_sub_50b30d0.csv)
    "m128_n256_k32_w8_s3_sub_fl": _cfg(128, 256, 32, 8, 3, subtile=1, flatten=1),
}
# fp32x3 holds each operand's TF32 high part and remainder in registers next to the accumulator: the
# plain road found 128x128 tiles fit with 8 warps and spill with 4, bigger tiles spill with 8. So here:
# compiled for sm_90a, 128x128x32 with 4 warps spilled 560 bytes a thread and 128x256x32 with 8 warps 336,
# and they ran 0.71 and 1.08 of cuBLAS FP32 at 4096^3 against 1.75 (data/h200/hopper/sweep.csv); both left
# the list, and test_matmul_hopper_sm90.py keeps spilling configs out of it
_FP32X3 = {
    "m128_n128_k32_w8_s4": _cfg(128, 128, 32, 8, 4),
    "m128_n128_k32_w8_s3": _cfg(128, 128, 32, 8, 3),
    "m128_n128_k64_w8_s3_ps": _cfg(128, 128, 64, 8, 3, store=0),
    "m128_n128_k32_w8_s4_ps": _cfg(128, 128, 32, 8, 4, store=0),
    "m128_n128_k32_w8_s4_g16": _cfg(128, 128, 32, 8, 4, group=16),
    "m128_n64_k32_w4_s4": _cfg(128, 64, 32, 4, 4),
    # split once (``_split``): hi and lo tiles of both operands a stage, twice the shared memory of a
    # TF32 stage (128x128x32: 64 KB), and two accumulators (the small products' apart): compiled for
    # sm_90a, 128x256 tiles and 4 warps spill (536-656 bytes a thread), so none is listed
    "m128_n128_k32_w8_s3_ps_split": _cfg(128, 128, 32, 8, 3, store=0, split=1),
    "m128_n128_k32_w8_s2_split": _cfg(128, 128, 32, 8, 2, split=1),
    "m128_n128_k16_w8_s5_ps_split": _cfg(128, 128, 16, 8, 5, store=0, split=1),
    "m128_n128_k16_w8_s4_split": _cfg(128, 128, 16, 8, 4, split=1),
    "m128_n128_k16_w8_s6_ps_split": _cfg(128, 128, 16, 8, 6, store=0, split=1),
    "m64_n256_k32_w8_s2_ps_split": _cfg(64, 256, 32, 8, 2, store=0, split=1),
    "m128_n128_k64_w8_s3_ps_nc": _cfg(128, 128, 64, 8, 3, store=0, nocopy=1),  # as TF32's '_nc'
    # the register-split base flattened: at 4096^3 1.76x / 1.86x cuBLAS FP32 (B as [K, N] / K-major) against
    # 1.78x / 1.87x in the same H100 run, at 8192^3 1.83x / 1.89x against 1.65x / 1.89x
    # (data/h100/hopper/sweep_fl_cdd2365.csv); the split base flattened needs 256 KB, not listed
    "m128_n128_k64_w8_s3_ps_fl": _cfg(128, 128, 64, 8, 3, store=0, flatten=1),
    # flattened at BLOCK_K 32, 4 stages: for the short K loops of the triangle update's gated GEMM (K = 128, four
    # steps a tile), where the next tile's loads should go out during the epilogue; unmeasured
    "m128_n128_k32_w8_s4_ps_fl": _cfg(128, 128, 32, 8, 4, store=0, flatten=1),
    # the TMA store in halves (32 KB staging), as they are and flattened: 224 KB each. On an H100 none beat its
    # '_ps' twin in the same run; flattened with B K-major they lost 4-13% (data/h100/hopper/sweep_sub*_50b30d0.csv)
    "m128_n128_k64_w8_s3_sub": _cfg(128, 128, 64, 8, 3, subtile=1),
    "m128_n128_k64_w8_s3_sub_fl": _cfg(128, 128, 64, 8, 3, subtile=1, flatten=1),
    "m128_n128_k32_w8_s3_sub_split": _cfg(128, 128, 32, 8, 3, subtile=1, split=1),
    "m128_n128_k32_w8_s3_sub_fl_split": _cfg(128, 128, 32, 8, 3, subtile=1, split=1, flatten=1),
    # two (or three) programs an SM, '_o2' ('_o3'): a program of 128x128 tiles at 8 warps takes an SM's
    # registers alone, and each K step of the split road waits on the tensor cores three times (its small
    # products' dots, then the large one), an SM idle in those waits. Half tiles at 4 warps compiled for sm_90a
    # need 157-226 registers and 66-115 KB of shared memory: two programs fit, one's wgmma filling the other's
    # waits. On an H100 each ran 1.3-1.6x its one-program twin, and all of them 1.15-1.62x cuBLAS FP32 against the
    # 8-warp base's 1.63-1.88x in the same run: two 4-warp programs are the base's two warpgroups, loading B's
    # tile twice (data/h100/hopper/sweep_o2_0ce32da.csv; kernels/NOTES.md)
    "m64_n128_k32_w4_s2_ps_split_o2": _cfg(64, 128, 32, 4, 2, store=0, split=1, per_sm=2),
    "m128_n64_k32_w4_s2_ps_split_o2": _cfg(128, 64, 32, 4, 2, store=0, split=1, per_sm=2),
    "m64_n128_k16_w4_s4_ps_split_o2": _cfg(64, 128, 16, 4, 4, store=0, split=1, per_sm=2),
    "m128_n64_k16_w4_s3_ps_split_o3": _cfg(128, 64, 16, 4, 3, store=0, split=1, per_sm=3),
    "m64_n128_k32_w4_s3_ps_o2": _cfg(64, 128, 32, 4, 3, store=0, per_sm=2),
    "m128_n64_k32_w4_s3_ps_o2": _cfg(128, 64, 32, 4, 3, store=0, per_sm=2),
    "m64_n128_k64_w4_s2_ps_o2": _cfg(64, 128, 64, 4, 2, store=0, per_sm=2),
}
_BF16 = {
    "m128_n256_k64_w8_s3": _cfg(128, 256, 64, 8, 3),
    "m128_n128_k64_w8_s3": _cfg(128, 128, 64, 8, 3),
    "m128_n128_k64_w4_s4": _cfg(128, 128, 64, 4, 4),
    "m128_n128_k64_w8_s4": _cfg(128, 128, 64, 8, 4),
    "m256_n128_k64_w8_s3": _cfg(256, 128, 64, 8, 3),
    "m128_n256_k64_w8_s4_sub": _cfg(128, 256, 64, 8, 4, subtile=1),
    "m128_n256_k64_w8_s3_g16": _cfg(128, 256, 64, 8, 3, group=16),
    "m128_n256_k64_w8_s3_fl": _cfg(128, 256, 64, 8, 3, flatten=1),
    "m128_n256_k64_w8_s3_ws": _cfg(128, 256, 64, 8, 3, ws=1),
}
# Bases: the development sweep's best at 4096^3 and 8192^3 with B handed over [K, N] (run of 2026-12-05,
# data/h200/hopper/sweep.csv): bf16 128x256x64 (1.00 and 1.04 of cuBLAS), TF32 128x256x32 with plain
# stores (0.72 and 0.86), fp32x3 128x128x64 with plain stores (1.75x and 1.81x cuBLAS FP32). The first
# guesses (128x128x32, 8 warps, 4 stages, TMA store) were 0.1-0.2 behind at TF32 and fp32x3.
_SIZES = ("M", "K", "N")
TILES = {
    "fp32x3": TileTable("matmul", _FP32X3, base="m128_n128_k64_w8_s3_ps", sizes=_SIZES),
    "tf32": TileTable("matmul", _TF32, base="m128_n256_k32_w8_s3_ps", sizes=_SIZES),
    "bf16": TileTable("matmul", _BF16, base="m128_n256_k64_w8_s3", sizes=_SIZES),
}
