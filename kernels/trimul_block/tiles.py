"""The triangle update's tile tables: one config per road and precision, and the rules that pick among
them (``TILES``). The block's launcher (``triton_block``) reads them; the configs' keys are the
contraction's (the triangle's channel-major road), the block's own kernels' and LayerNorms', the
projections' road (``_projections``) and the fused road's (``_fused``)."""
from __future__ import annotations

from kernels._triton import TileTable
from kernels.triangle.triton_kernel import TILES as TRIANGLE_TILES

from . import _fused
from . import _projections as proj
from .spec import NAME


# The contraction's keys are the triangle's channel-major ones (its LAYOUT is fixed here and
# PER_CHANNEL belongs to the in-place road); the rest tile the block's own kernels and LayerNorms.
TRIANGLE_KEYS = ("STORE", "K_INNER", "BLOCK_I", "BLOCK_J", "BLOCK_K", "BLOCK_C", "GROUP_I", "num_warps",
                 "num_stages")


def _config(contraction: dict, gate=(64, 32, 4), ln=(8, 4, 0), out_gate=(32, 64, 4), gemm=None,
            contract="ieee", fused=None, tma=0) -> dict:
    """A block config; ``contract='tf32x3'`` runs the FP32 contraction as three TF32 tensor-core products
    (FP32 accuracy; without the key it runs IEEE FP32 on the FMA units, or bf16 products at bf16); ``tma``: the
    steps road's contraction by the persistent TMA kernel (``kernels/triangle/_hopper``) where the card and N allow;
    ``fused``: the fused road's keys (``_fused.keys``) where the config takes that road."""
    tri = {k: contraction[k] for k in TRIANGLE_KEYS}
    return dict(tri, GATE_V=gate[0], GATE_H=gate[1], GATE_WARPS=gate[2], LN_BLOCK_R=ln[0], LN_WARPS=ln[1],
                LN_EVICT=ln[2], OUT_R=out_gate[0], OUT_C=out_gate[1], OUT_WARPS=out_gate[2],
                **proj.gemm_keys(*(gemm or ("cublas",))), CONTRACT=contract, CONTRACT_TMA=tma,
                **(fused or _fused.keys(road_name="steps")))


# Names: the projections' road and the contraction's epilogue ('permute' or 'direct'), then what sets
# the config apart; in the order a tile sweep tries them, the plain one first: the triangle's base
# config (its best channel-major config at FP32, 'permute' epilogue) and plain tiles elsewhere;
# LayerNorm rows of 128 channels are short, so 8 a program (one a program would leave most of its 128
# threads idle).
_CONTRACTION = TRIANGLE_TILES["fp32"]["permute_128x64x16_c1_w4_s3_ij"]
_SCATTER = dict(_CONTRACTION, STORE="direct", BLOCK_I=64, BLOCK_J=64, BLOCK_C=4, num_warps=8)
# the contraction by TMA with matmul's Hopper fp32x3 tiles (its best at 4096^3)
_TMA_X3 = dict(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], BLOCK_I=128, BLOCK_J=128, BLOCK_K=64, num_warps=8,
               num_stages=3)
_FP32 = {
    "cublas_permute": _config(_CONTRACTION),
    "cublas_permute_ln_hints": _config(_CONTRACTION, ln=(8, 4, 1)),  # LayerNorm's cache hints
    "cublas_permute_big_gates": _config(_CONTRACTION, gate=(128, 32, 8), ln=(16, 8, 1), out_gate=(64, 64, 8)),
    "cublas_permute_small_gates": _config(_CONTRACTION, gate=(32, 64, 4), ln=(4, 4, 1)),
    # the GEMM writes o directly, runs of 4 channels: no transposing copy, one launch fewer
    "cublas_direct_64x64_c4": _config(_SCATTER, ln=(8, 4, 1)),
    "cublas_direct_128x64_c1": _config(dict(_SCATTER, STORE="direct", BLOCK_C=1, BLOCK_I=128, BLOCK_J=64, num_warps=4),
                                       ln=(8, 4, 1)),
    # the fused projections (tf32x3, tiles from the MLP block's sweep list), the weights copied K-major or not
    "fused_m128_n64_k32_w4_s4": _config(_CONTRACTION, ln=(8, 4, 1), gemm=("fused",)),
    "fused_m128_n64_k32_w4_s4_bn": _config(_CONTRACTION, ln=(8, 4, 1), gemm=("fused", 128, 64, 32, 4, 4, 0)),
    "fused_m128_n128_k32_w8_s3": _config(_CONTRACTION, ln=(8, 4, 1), gemm=("fused", 128, 128, 32, 8, 3)),
    "fused_m64_n128_k32_w4_s4": _config(_CONTRACTION, ln=(8, 4, 1), gemm=("fused", 64, 128, 32, 4, 4)),
    # the contraction on the tensor cores at FP32 accuracy (tf32x3; the operands k-innermost, as wgmma
    # reads 4-byte operands): the triangle's fp32x3 tiles, its sweep's best at N = 384 first
    "fused_m64_n128_k32_w4_s4_x3": _config(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], ln=(8, 4, 1),
                                           gemm=("fused", 64, 128, 32, 4, 4), contract="tf32x3"),
    "fused_m64_n128_k32_w4_s4_x3_128": _config(TRIANGLE_TILES["fp32x3"]["permute_128x128x32_c1_w8_s3"],
                                               ln=(8, 4, 1), gemm=("fused", 64, 128, 32, 4, 4), contract="tf32x3"),
    # the contraction by TMA, persistent (kernels/triangle/_hopper), with matmul's Hopper fp32x3 tiles and the x3
    # config's own (128x256x32 spilled, left out). On an H100 128x128x64 took the block from 9.30 to 8.88 ms at
    # N = 1024, a tie at 256; its pointer fallback would need 192 KB of shared memory off Hopper (kernels/NOTES.md)
    **{f"fused_m64_n128_k32_w4_s4_x3_tma_{bi}x{bj}x{bk}_w{w}_s{s}":
       _config(dict(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk,
                    num_warps=w, num_stages=s), ln=(8, 4, 1), gemm=("fused", 64, 128, 32, 4, 4), contract="tf32x3",
               tma=1)
       for bi, bj, bk, w, s in ((128, 128, 64, 8, 3), (128, 128, 32, 8, 4), (128, 64, 32, 4, 4))},
    # and the projections on matmul's Hopper GEMM too (as 'hopper_x3' below)
    "hopper_x3_tma_128x128x64_w8_s3": _config(_TMA_X3, ln=(8, 4, 1), gemm=("hopper",), contract="tf32x3", tma=1),
    # both projections on matmul's Hopper GEMM (TMA, warpgroup MMA, persistent; its own tiles)
    "hopper_x3": _config(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], ln=(8, 4, 1), gemm=("hopper",),
                         contract="tf32x3"),
    # the gates and the mask in the first projection's epilogue (``_gated_in``), the contraction as above or by TMA; on
    # an H100 at N = 1024 8,117 us, by TMA 7,692, against 9,277 (data/h100/fused/probe_fp32*_c9a0de8.txt)
    "hopper_gated_x3": _config(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], ln=(8, 4, 1),
                               gemm=("hopper_gated", 64, 128, 32, 4, 4), contract="tf32x3"),
    "hopper_gated_x3_tma_128x128x64_w8_s3": _config(_TMA_X3, ln=(8, 4, 1), gemm=("hopper_gated", 64, 128, 32, 4, 4),
                                                    contract="tf32x3", tma=1),
    # the above with o left channel-major for the second LayerNorm (STORE 'layernorm'): no transposing copy; on an
    # H200 at N = 1024 7.28 ms, '_r32' (32 rows a LayerNorm program, 128-byte runs a channel) 7.18, against 7.41
    **{f"hopper_gated_x3_tma_128x128x64_w8_s3_lncm{'_r32' if rows == 32 else ''}":
       _config(dict(_TMA_X3, STORE="layernorm"), ln=(rows, 4, 1), gemm=("hopper_gated", 64, 128, 32, 4, 4),
               contract="tf32x3", tma=1) for rows in (8, 32)},
    # and the Hopper GEMMs' tile loops flattened (a tile's loads during the last one's epilogue): on an H100 the output
    # GEMM 15% faster, the gated one 13% slower (fused/probe_fl_a6f663d.txt), so '_ofl' flattens the output GEMM's alone
    "hopper_gated_x3_tma_128x128x64_w8_s3_lncm_r32_fl": _config(
        dict(_TMA_X3, STORE="layernorm"), ln=(32, 4, 1), contract="tf32x3", tma=1,
        gemm=("hopper_gated", 64, 128, 32, 4, 4, 1) + ("m128_n128_k32_w8_s4_ps_fl",) * 2),
    "hopper_gated_x3_tma_128x128x64_w8_s3_lncm_r32_ofl": _config(
        dict(_TMA_X3, STORE="layernorm"), ln=(32, 4, 1), contract="tf32x3", tma=1,
        gemm=("hopper_gated", 64, 128, 32, 4, 4, 1, "", "m128_n128_k32_w8_s4_ps_fl")),
    # three launches (_fused), projections and contraction tf32x3; Triton splits the [pairs, C] operand in registers,
    # so a program takes chunks of 16-32 columns with 8 warps (4 warps and 32 columns spill on sm_90a)
    "fused_r64_h32_w8_x3": _config(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], contract="tf32x3",
                                   fused=_fused.keys(bmm="triton", in_h=32, in_warps=8, fin_c=32, fin_warps=8)),
    # and its contraction by TMA (kernels/triangle/_hopper), with matmul's Hopper fp32x3 tiles
    "fused_r64_h32_w8_x3_tma": _config(dict(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], BLOCK_I=128,
                                            BLOCK_J=128, BLOCK_K=64, num_warps=8, num_stages=3), contract="tf32x3",
                                       fused=_fused.keys(bmm="triton", in_h=32, in_warps=8, fin_c=32, fin_warps=8),
                                       tma=1),
    # (128 pairs with 16-column chunks failed at random shapes on two GPUs, passing under the interpreter: withdrawn)
    "fused_r64_h16_x3": _config(TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], contract="tf32x3",
                                fused=_fused.keys(bmm="triton", in_h=16, fin_c=16)),
}


def _tensor_cores(store, bi, bj, bk, bc, warps, stages, group=8):
    """A contraction config for bf16 tiles on the tensor cores: k innermost in the copies (both
    operands K-major, as wgmma reads them), BLOCK_K = 64 (one 128-byte line of bf16 a row)."""
    return dict(STORE=store, K_INNER=True, BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk, BLOCK_C=bc, GROUP_I=group,
                num_warps=warps, num_stages=stages)


# bf16 (predictions until a GPU sweep): 128x128 tiles, one channel a program, and the transposing copy
# ('permute'); 'direct' with BLOCK_C channels a program stores runs of BLOCK_C bf16 values (16 fill a
# 32-byte sector), trading the copy's extra pass for a narrower accumulator tile.
_PERMUTE_BF16 = _tensor_cores("permute", 128, 128, 64, 1, 8, 3)
_BF16 = {
    "cublas_permute_128x128": _config(_PERMUTE_BF16, ln=(8, 4, 1)),
    "cublas_permute_128x128_s4": _config(_tensor_cores("permute", 128, 128, 64, 1, 8, 4), ln=(8, 4, 1)),
    "cublas_permute_128x64": _config(_tensor_cores("permute", 128, 64, 64, 1, 4, 4), ln=(8, 4, 1)),
    "cublas_direct_64x64_c8": _config(_tensor_cores("direct", 64, 64, 64, 8, 8, 3), ln=(8, 4, 1)),
    "cublas_direct_64x32_c16": _config(_tensor_cores("direct", 64, 32, 64, 16, 8, 3), ln=(8, 4, 1)),  # 128 FP32 values a thread
    # the fused projections: bf16 wgmma reads B as it comes, so no K-major copy unless asked
    "fused_m128_n64_k64_w4_s4_bn": _config(_PERMUTE_BF16, ln=(8, 4, 1), gemm=("fused", 128, 64, 64, 4, 4, 0)),
    "fused_m128_n128_k64_w8_s3_bn": _config(_PERMUTE_BF16, ln=(8, 4, 1), gemm=("fused", 128, 128, 64, 8, 3, 0)),
    "fused_m128_n128_k64_w8_s3": _config(_PERMUTE_BF16, ln=(8, 4, 1), gemm=("fused", 128, 128, 64, 8, 3, 1)),
    "hopper": _config(_PERMUTE_BF16, ln=(8, 4, 1), gemm=("hopper",)),  # the projections on the Hopper GEMM
    "hopper_gated": _config(_PERMUTE_BF16, ln=(8, 4, 1), gemm=("hopper_gated",)),  # and the gates in its epilogue
    # three launches (_fused): LayerNorm, projections, gates and mask in one; the contraction; LayerNorm,
    # output projection and gate in one. Pairs a program, column chunks and warps, then the contraction's
    # road. Compiled for sm_90a without a GPU (tests/test_trimul_block_sm90.py): chunks of 32 columns keep
    # both kernels out of local memory at 64 pairs and 4 warps or 128 and 8; chunks of 64 spill (392-896
    # bytes a thread), so none is listed
    "fused_r128_h32_w8_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_r=128, in_h=32, in_warps=8, fin_r=128,
                                                                           fin_c=32, fin_warps=8)),
    "fused_r64_h32_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, fin_c=32)),
    "fused_r128_h32_w8_triton": _config(_PERMUTE_BF16, fused=_fused.keys(bmm="triton", in_r=128, in_h=32, in_warps=8,
                                                                           fin_r=128, fin_c=32, fin_warps=8)),
    # the H100 sweep's best of 29 (data/h100/fused, N = 1024): the first kernel 849 us with gate and value
    # in one dot (931 in two), the last 388 with 128 pairs and chunks of 64 at 4 warps (429 at 64 and 32)
    "fused_r64_h32_join_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, fin_r=128, fin_c=64)),
    # its weights through tensor descriptors (TMA): the first kernel 667 us against 851 (the H100's second
    # sweep, data/h100/fused/sweep2.jsonl; more stages or pairs a program were slower)
    "fused_r64_h32_tma_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True, fin_r=128,
                                                                           fin_c=64)),
    # and the last kernel's w_out through a descriptor: 396 us against 382 with 128 pairs a program
    "fused_r64_h32_tma2_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True, fin_r=128,
                                                                            fin_c=64, fin_tma=True)),
    # with 64 pairs a program in the last kernel: 331 us against 382-396 (the H200's probe at N = 1024,
    # data/h200/fused/probe2.txt; the block 1,357 us against 1,412 for fused_r64_h32_tma_cublas)
    "fused_r64_h32_tma2_r64_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True, fin_r=64,
                                                                                fin_c=64, fin_tma=True)),
    # the last kernel reading o's tile in its own order (Nsight Compute found the other order's change of
    # layout bank-conflicted, 5-6-way: data/h100/fused/ncu_full_*). Measured on an H200: no change, the last
    # kernel 329-330 us either way (data/h200/fused/probe_fin_t_6d61599.txt); not the rule
    "fused_r64_h32_tma2_r64t_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True, fin_r=64,
                                                                                 fin_c=64, fin_tma=True, fin_t=True)),
    # the first kernel with chunks of 16 hidden channels, and with its registers held to 96: a profile found it
    # latency-bound at 16 warps an SM (124 registers and 32.8 KB of shared memory a block each cap it at 4
    # blocks); compiled for sm_90a on the CPU, chunks of 16 take 100 registers and 24.6 KB, and held to 96
    # they spill nothing, so 5 blocks fit. Both slower on an H100: the first kernel 899 and 789 us against 676
    # (data/h100/fused/probe_h16_8667fe7.txt)
    "fused_r64_h16_tma2_r64_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=16, join=True, tma=True, fin_r=64,
                                                                                fin_c=64, fin_tma=True)),
    "fused_r64_h16_n96_tma2_r64_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=16, join=True, tma=True, fin_r=64,
                                                                                    fin_c=64, fin_tma=True,
                                                                                    in_maxnreg=96)),
    # the config above with the gates' sigmoid on the special-function unit's approximations: a source-level
    # profile (Nsight Compute, H100, N = 1024) found the first kernel's 384 sigmoids a pair to be about a
    # third of its instructions, in range checks for subnormals. The first kernel 629 us ('fast', the rule
    # since) and 625 ('tanh', 2^-11 coarse) against 677 (data/h100/fused/probe_sig_gtma_40ae385.txt)
    "fused_r64_h32_tma2_r64_fsig_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True,
                                                                                     fin_r=64, fin_c=64, fin_tma=True,
                                                                                     sig="fast")),
    "fused_r64_h32_tma2_r64_tanh_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True,
                                                                                     fin_r=64, fin_c=64, fin_tma=True,
                                                                                     sig="tanh")),
    # and with the last kernel's gate read and output written through descriptors: the same profile found its
    # pointer load of g 8-way bank-conflicted in the change to the product's layout (half of its shared-memory
    # wavefronts excess). The last kernel 342 us against 345, alone or with tanh (same probe)
    "fused_r64_h32_tma2_r64g_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True, fin_r=64,
                                                                                 fin_c=64, fin_tma=True,
                                                                                 fin_gtma=True)),
    "fused_r64_h32_tma2_r64g_tanh_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True,
                                                                                      fin_r=64, fin_c=64, fin_tma=True,
                                                                                      fin_gtma=True, sig="tanh")),
    # the output gate computed by the last kernel from z, as cuEquivariance's finishing kernel does (its bytes in
    # a profile: z in, o in, y out); the first kernel then stores a and b only. On an H100 the first kernel
    # 470 us against 626, the last 521 (584 with chunks of 32) against 342: the block 1,367 us against 1,345
    # (data/h100/fused/probe_zg_52f275f.txt); not the rule
    "fused_r64_h32_tma2_r64_fsig_zg_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True,
                                                                                        fin_r=64, fin_c=64, fin_tma=True,
                                                                                        sig="fast", fin_zgate=True)),
    "fused_r64_h32_tma2_r64c32_fsig_zg_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(
        in_h=32, join=True, tma=True, fin_r=64, fin_c=32, fin_tma=True, sig="fast", fin_zgate=True)),
    # a chunk's weight columns of a and of b in one tile (one TMA wait and one dot, where Triton had waited on
    # two loads and two dots in series), and the output gate in chunks of 64 (two round trips to L2, not four).
    # On an H100 at N = 1024 the first kernel 604 us with the tile alone, 623 with the gate's chunks alone,
    # 565-571 with both (the rule since) against 619-627 (data/h100/fused/probe_ab*_*.txt); the gate in one
    # chunk of 128 took 654 (147 registers, 3 blocks an SM), or 567 held to 128 registers: not listed
    "fused_r64_h32_tma2_r64_fsig_ab_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True,
                                                                                        fin_r=64, fin_c=64, fin_tma=True,
                                                                                        sig="fast", ab=True)),
    "fused_r64_h32_tma2_r64_fsig_ab_g64_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(
        in_h=32, join=True, tma=True, fin_r=64, fin_c=64, fin_tma=True, sig="fast", ab=True, gc=64)),
    # the rule with its first kernel's LayerNorm unscaled where a tile's rows allow (the overflow guard's max, its
    # reduction and product skipped): that kernel's profile found it latency-limited at 25% occupancy on the
    # instructions it issues. Compiled for sm_90a: 128 registers against 122, still 4 blocks an SM. On an H100 at
    # N = 1024 the first kernel 574-580 us against 566-569 (data/h100/fused/probe_lnf_d2f4cf3.txt); not the rule
    "fused_r64_h32_tma2_r64_fsig_ab_g64_lnf_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(
        in_h=32, join=True, tma=True, fin_r=64, fin_c=64, fin_tma=True, sig="fast", ab=True, gc=64, lnfast=True)),
    "fused_r64_h32_tma2_r64_fsig_g64_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(
        in_h=32, join=True, tma=True, fin_r=64, fin_c=64, fin_tma=True, sig="fast", gc=64)),
    # the first kernel persistent, w_in kept in shared memory (_fused_resident): its weights cross from L2
    # once an SM, not once a tile of 64 pairs (160 KB for 16 KB of z). Compiled for sm_90a: 64 pairs and 8
    # warps fit (255 registers, no spills, 184 KB of shared memory); 4 warps spill 584 bytes a thread, 32
    # pairs at 4 warps 56, 128 pairs at 8 warps 560. Slower on an H100: 910 us against 677 (kernels/NOTES.md;
    # the probe's output file was never committed)
    "fused_res_r64_w8_tma2_r64_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, in_warps=8, join=True,
                                                                                   resident=True, fin_r=64, fin_c=64,
                                                                                   fin_tma=True)),
    # the first kernel as a GEMM on z as it lies, the LayerNorm folded into its epilogue (_fused_fold): z's tile by
    # TMA straight to the tensor cores; one tile of columns a program ('fold'), or all of a tile of pairs' columns
    # in turn, z's statistics formed once and w' pipelined ('foldl', its stages after 's'); the rule's last kernel.
    # Compiled for sm_90a at C = H = 128 (registers; shared memory), with the branch for tiles whose rows cancel:
    # 101 and 64 KB (r64 n128 w8), 155 and 64 KB (w4), 139 and 96 KB (foldl r64 n128 w8 s2), 128 and 120 KB (its
    # TMA stores). On an H100 at N = 1024 every form was slower than the rule's first kernel: 1,224-1,582 us against
    # 569-572 (data/h100/fused/probe_fold_ba5e369.txt). Two loop forms of 64 columns, listed then, failed there
    # (wrong at N = 96, an illegal address at random shapes): left out, and IN_FOLD is held to 128
    **{f"fused_fold{'l' if loop else ''}_r{r}_n{bn}_w{w}{f'_s{loop}' if loop else ''}{'_ts' if ts else ''}_r64_cublas":
       _config(_PERMUTE_BF16, fused=_fused.keys(fold=bn, fold_loop=loop, in_r=r, in_warps=w, tstore=ts, fin_r=64,
                                                fin_c=64, fin_tma=True, sig="fast"))
       for r, bn, w, loop, ts in ((64, 128, 8, 0, False), (64, 128, 4, 0, False), (64, 128, 8, 2, False),
                                  (64, 128, 8, 2, True))},
    # the first kernel's products formed [channels, pairs], the order a and b lie in, so neither a transpose nor a
    # gate/value split (_fused_cm): the grid kernel's profile found its shared-memory stores 10.7-way conflicted and
    # its integer pipe the busiest (each compiles for sm_90a unspilled: tests/test_trimul_block_sm90.py); rule's last
    # 'cm8' (IN_CM=2): a chunk's gates and values as one product of alternate blocks of 8 rows, split within each
    # thread's registers, two weight tiles and two products a chunk, not four. On an H100 at N = 1024 none beat the
    # rule's first kernel, 564-569 us: 'cm' r64 w4 576-577, the rest 617-798 (data/h100/fused/probe_cm_28f5d7c.txt; a
    # profile found the conflicts gone and the kernel as latency-bound as before: kernels/NOTES.md)
    **{f"fused_cm{'8' if cm == 2 else ''}_r{r}_h64_w{w}{'_ts' if ts else ''}_r64_cublas":
       _config(_PERMUTE_BF16, fused=_fused.keys(cm=cm, in_r=r, in_h=64, in_warps=w, tstore=ts, gc=64, fin_r=64,
                                                fin_c=64, fin_tma=True, sig="fast"))
       for cm, r, w, ts in ((1, 64, 4, False), (1, 64, 4, True), (1, 64, 8, False), (1, 64, 8, True),
                            (1, 128, 8, False), (1, 128, 8, True), (2, 64, 4, False), (2, 64, 4, True),
                            (2, 64, 8, True), (2, 128, 8, True))},
    # the first kernel persistent, one program an SM, w_in held in shared memory by TMA and z's tiles pipelined (its
    # stages after 's'; _fused_pipe), the rule's last kernel. Compiled for sm_90a at C = H = 128 (registers; shared
    # memory): r64 w4 s2 255 and 197 KB, s3 255 and 213 KB; r64 w8 s2 233 and 215 KB; r128 w8 s1 255 and 197 KB,
    # s2 252 and 226 KB (cuEquivariance's projection kernel: 128 pairs a tile, by its name, and 230 KB). On an H100 at
    # N = 1024, r64 w8 s2 took 1,165 us against the rule's first kernel's 570
    # (data/h100/fused/probe_pipe_tma_55be008.txt)
    **{f"fused_pipe_r{r}_w{w}_s{s}_r64_cublas":
       _config(_PERMUTE_BF16, fused=_fused.keys(pipe=s, ab=True, join=True, tma=True, in_r=r, in_h=32, in_warps=w,
                                                fin_r=64, fin_c=64, fin_tma=True, sig="fast"))
       for r, w, s in ((64, 4, 2), (64, 4, 3), (64, 8, 2), (128, 8, 1), (128, 8, 2))},
    # the last kernel in the same shape (FIN_PIPE, _fused_pipe): persistent, w_out held in shared memory, o's and g's
    # tiles pipelined (its stages after 's'), behind the rule's first kernel ('ab_g64') or the pipelined one above
    # ('opipez': the output gate formed there from z, FIN_ZGATE, so g never crosses memory: 256 MB fewer at N = 1024).
    # On an H100 at N = 1024 (same probe): the last kernel 692 us (opipe r64 w8 s2) and 935 (opipez) against the rule's
    # 343; no rule picks them
    **{f"fused_{'pipe_r64_w8_s2' if first else 'ab_g64'}_opipe{'z' if zg else ''}_r{r}_w{w}_s{s}_cublas":
       _config(_PERMUTE_BF16, fused=_fused.keys(pipe=2 if first else 0, ab=True, join=True, tma=True, in_h=32,
                                                in_warps=8 if first else 4, gc=0 if first else 64, fin_r=r, fin_c=64,
                                                fin_warps=w, fin_tma=True, fin_pipe=s, fin_zgate=zg, sig="fast"))
       for first, zg, r, w, s in ((False, False, 64, 4, 2), (False, False, 64, 4, 3), (False, False, 64, 8, 2),
                                  (False, False, 128, 8, 2), (True, False, 64, 4, 2), (False, True, 64, 8, 2),
                                  (False, True, 64, 4, 2), (True, True, 64, 8, 2))},
    # and a, b and g stored through descriptors: the first kernel 686 us against 668 (same probe)
    "fused_r64_h32_tma3_cublas": _config(_PERMUTE_BF16, fused=_fused.keys(in_h=32, join=True, tma=True, fin_r=128,
                                                                            fin_c=64, fin_tma=True, tstore=True)),
}
# One config at every size (no rule). fp32: the block's tile sweep (run 20261204T205225Z, N = 128,
# kernel time): the fused projections with the weights copied K-major, 113.4-114.9 us against
# 138.8-140.0 for the cuBLAS entries (without the copies 131.0: the tf32x3 product staging an N-major
# B); the contraction's tiles barely mattered. bf16 (same run): the cuBLAS projections, 41.0 us,
# against 45.1-48.9 fused (Triton's bf16 GEMM is slower than cuBLAS's and the gate it saves is a
# small pass in bf16).
# From N = 256 (AlphaFold 3-class sizes) the contraction, 2 N^3 H FLOPs, is most of the FP32 block's work:
# the triangle's own sweep at N = 384, C = 128 measured its tf32x3 tiles at 318 us against 432 for the
# best IEEE FP32 ones (kernels/NOTES.md), so from there the block contracts on the tensor cores.
# At bf16 the fused road's three launches (_fused) replace the steps' eight: on an H100 at N = 1024,
# 1.46 ms against 2.91 (data/h100/fused/). Not at FP32: its tf32x3 projections in one kernel
# took 5.6-9.1 ms against the steps' 5.7 for the same work, and the block 10.6-14.8 ms against 9.4.
# FP32 rule: the gated one by TMA (elsewhere the x3 config), 15-17% faster (c9a0de8), o left channel-major for a
# LayerNorm of 32 rows a program since ad466b4's H200 probe: 7.18 ms against 7.41 at N = 1024.
AF3_CLASS = lambda s: s["N"] >= 256  # noqa: E731
FUSABLE = lambda s: AF3_CLASS(s) and max(s["C"], s["H"]) <= _fused.MAX_WIDTH  # noqa: E731
# FP32 from N = 256: the gated GEMM, the TMA contraction, o channel-major for the LayerNorm, the output GEMM flattened
TILES = {"fp32": TileTable(NAME, _FP32, base="fused_m64_n128_k32_w4_s4", rule=(("hopper_gated_x3_tma_128x128x64_w8_s3_lncm_r32_ofl", AF3_CLASS),)),
         "bf16": TileTable(NAME, _BF16, base="cublas_permute_128x128", rule=(("fused_r64_h32_tma2_r64_fsig_ab_g64_cublas", FUSABLE),))}
FIRST = TILES["fp32"]["cublas_permute"]
FIRST_BF16 = TILES["bf16"]["cublas_permute_128x128"]
