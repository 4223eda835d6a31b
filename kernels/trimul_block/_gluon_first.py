"""The fused road's first kernel as a persistent, warp-specialised Gluon kernel (Hopper, bf16, C = H = 128).

Why: the grid kernel (``_fused._in_kernel``, 16,384 programs of 64 pairs at N = 1024) is held by latency, not
by its work: a profile found under one eligible warp a scheduler, each program waiting on z from DRAM, then on
its weight tiles and products in series (kernels/NOTES.md). Persistent Triton forms were twice as slow: one
program an SM runs its LayerNorm, products and stores in series. cuEquivariance's projection kernel is
persistent and warp-specialised. This one is too, in Gluon (layouts, shared memory, barriers and wgmma waits
written by hand), and computes the rule's function (``fused_r64_h32_tma2_r64_fsig_ab_g64_cublas`` at bf16):

    zn = bf16(LN(z[r]))    FP32 with the overflow guard's scaling, as ``_fused_rows._layernorm_rows`` at bf16
    p  = zn @ w_in + b_in  bf16 products summed in FP32, the bias after the product
    a  = bf16(sigmoid(p[:, :H]) p[:, H:2H] m[r]), b likewise from [2H:4H]: stored channel-major [B, H, N N]
    g  = bf16(sigmoid(p[:, 4H:]))                                          stored [B N N, C]

with the rule's 'fast' sigmoid. Three partitions, 384 threads: a loader warp (w_in once by TMA, 160 KB that stay
in shared memory for the program's life, then z's tiles of 64 pairs into a ring) and two consumer warpgroups on
alternate tiles, so one's LayerNorm, sigmoids and stores run while the other's products are on the tensor cores.
A consumer reads its z tile straight into wgmma's register operand layout, normalises it there (zn never goes to
shared memory: w_in fills it), issues a slot's two products before the last slot's epilogue, and stores a and b
transposed through a small staging tile by TMA. Tiles run over the flat rows B N N: a tile that crosses into the
next complex is stored twice, each copy clipped by TMA at the complex's edge.
Not under the interpreter (Gluon has none): ``_gluon_first_check`` holds the CPU checks, and
tools/probe_trimul_gluon.py compares it with the rule's kernel on a GPU. Not yet run on a GPU.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma_wait

from mage.errors import MageInputError

from ._gluon_parts import (BR, C_WIDTH, NB, _BR, _C, _NB, _NPAR, _PG, _block, _half, _is_a, _issue, _layernorm,
                           _opaque_zero, _sigmoid, _stage_store)




@gluon.jit
def _loader(z_desc, w_desc, z_smem, w_smem, z_full, z_empty, w_bar, R, nprog):
    S: gl.constexpr = z_smem.type.shape[0]
    NW: gl.constexpr = w_smem.type.shape[0]
    # w_in once: NW blocks [C, 64] on one barrier (160 KB of transaction bytes: under the 2^20 - 1 limit)
    mbarrier.expect(w_bar, NW * w_desc.block_type.nbytes)
    for j in gl.static_range(NW):
        tma.async_copy_global_to_shared(w_desc, [0, j * _NB], w_bar, w_smem.index(j))
    tiles = gl.cdiv(R, _BR)
    i = 0
    for t in range(gl.program_id(0), tiles, nprog):
        s = i % S
        ph = (i // S) & 1
        mbarrier.wait(z_empty.index(s), ph ^ 1)  # first round: a fresh barrier passes parity 1 at once
        mbarrier.expect(z_full.index(s), z_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(z_desc, [t * _BR, 0], z_full.index(s), z_smem.index(s))
        i += 1


@gluon.jit
def _consumer(z_smem, w_smem, stg, par, z_full, z_empty, w_bar, a_desc, b_desc, g_desc, M,
              R, NN, nprog, eps, WG: gl.constexpr, SIG: gl.constexpr, PIPE: gl.constexpr):
    S: gl.constexpr = z_smem.type.shape[0]
    STB: gl.constexpr = stg.type.shape[0]
    W: gl.constexpr = gl.num_warps()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, _NB, 16])
    dot: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    rows_l: gl.constexpr = gl.SliceLayout(1, mma)
    cols_l: gl.constexpr = gl.SliceLayout(0, mma)
    zero = gl.zeros([_BR, _NB], gl.float32, mma)
    tiles = gl.cdiv(R, _BR)
    mbarrier.wait(w_bar, 0)
    i = WG  # local tile index: the program's tiles pid, pid + nprog, ... ; this consumer takes i = WG mod 2
    u = 0  # staging uses so far (buffer u % STB)
    for t in range(gl.program_id(0) + WG * nprog, tiles, 2 * nprog):
        s = i % S
        mbarrier.wait(z_full.index(s), (i // S) & 1)
        x = z_smem.index(s).load(dot).to(gl.float32)
        mbarrier.arrive(z_empty.index(s), count=1)  # lowered as bar.sync of the warpgroup + one arrive
        zn = _layernorm(x, par, eps, dot).to(gl.bfloat16)
        row0 = t * _BR
        rows = row0 + gl.arange(0, _BR, layout=rows_l)
        m = gl.load(M + rows, mask=rows < R, other=0.0).to(gl.float32)
        cx = row0 // NN
        p0 = row0 - cx * NN
        second = p0 + _BR > NN  # the tile runs into complex cx + 1 (clipped away where there is none)
        p1 = p0 - NN
        zo = _opaque_zero(t)
        if PIPE:
            n0, n1 = _issue(zn, w_smem, _block(0, 0), _block(0, 1), zero, zo)
        for slot in gl.static_range(5):
            # slot -> w_in blocks: (0, 2) a gate/value channels 0:64, (1, 3) 64:128, (4, 6), (5, 7) b's, (8, 9) g's
            if PIPE:
                acc0, acc1 = n0, n1
                if slot < 4:
                    n0, n1 = _issue(zn, w_smem, _block(slot + 1, 0), _block(slot + 1, 1), zero, zo)
                    acc0, acc1, _ = warpgroup_mma_wait(num_outstanding=2, deps=[acc0, acc1, zn])
                else:
                    acc0, acc1, _ = warpgroup_mma_wait(num_outstanding=0, deps=[acc0, acc1, zn])
            else:
                acc0, acc1 = _issue(zn, w_smem, _block(slot, 0), _block(slot, 1), zero, zo)
                acc0, acc1, _ = warpgroup_mma_wait(num_outstanding=0, deps=[acc0, acc1, zn])
            p_0 = acc0 + par.slice(_block(slot, 0) * _NB, _NB).load(cols_l).to(gl.float32)[None, :]
            p_1 = acc1 + par.slice(_block(slot, 1) * _NB, _NB).load(cols_l).to(gl.float32)[None, :]
            if slot < 4:
                v = (_sigmoid(p_0, SIG) * p_1 * m[:, None]).to(gl.bfloat16)
                cr = cx * _C + _half(slot) * _NB  # a and b viewed as [B*H, NN]
                if _is_a(slot):
                    _stage_store(a_desc, stg.index(u % STB), v, cr, p0, second, p1, True, STB)
                else:
                    _stage_store(b_desc, stg.index(u % STB), v, cr, p0, second, p1, True, STB)
                u += 1
            else:
                g0 = _sigmoid(p_0, SIG).to(gl.bfloat16)
                _stage_store(g_desc, stg.index(u % STB), g0, row0, 0, False, 0, False, STB)
                u += 1
                g1 = _sigmoid(p_1, SIG).to(gl.bfloat16)
                _stage_store(g_desc, stg.index(u % STB), g1, row0, _NB, False, 0, False, STB)
                u += 1
        i += 2
    tma.store_wait(0)  # the staging tiles must outlive the TMA engine's reads


@gluon.jit
def first_in_kernel(z_desc, w_desc, a_desc, b_desc, g_desc, M, GAMMA, BETA, BIAS, R, NN, nprog, eps,
                    S: gl.constexpr, STB: gl.constexpr, SIG: gl.constexpr, PIPE: gl.constexpr,
                    LOAD_REGS: gl.constexpr, CONS_REGS: gl.constexpr):
    gl.static_assert(S % 2 == 0)  # each consumer owns the stages of its tiles' parity (see first_kernel)
    gl.static_assert(z_desc.block_type.shape[0] == _BR)
    gl.static_assert(z_desc.block_type.shape[1] == _C)
    gl.static_assert(w_desc.block_type.shape[0] == _C)
    gl.static_assert(w_desc.block_type.shape[1] == _NB)
    NW: gl.constexpr = (4 * _C + _C) // _NB  # 10 blocks of w_in
    z_smem = gl.allocate_shared_memory(gl.bfloat16, [S, _BR, _C], z_desc.layout)
    w_smem = gl.allocate_shared_memory(gl.bfloat16, [NW, _C, _NB], w_desc.layout)
    st0 = gl.allocate_shared_memory(gl.bfloat16, [STB, _BR, _NB], a_desc.layout)  # consumer 0's staging
    st1 = gl.allocate_shared_memory(gl.bfloat16, [STB, _BR, _NB], a_desc.layout)  # consumer 1's
    # b_in, gamma, beta copied once into shared memory by the parent region's warps (before the fork)
    par = gl.allocate_shared_memory(gl.bfloat16, [_NPAR], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    v_l: gl.constexpr = gl.BlockedLayout([2], [32], [gl.num_warps()], [0])
    ic = gl.arange(0, _C, layout=v_l)
    for j in gl.static_range(5):
        par.slice(j * _C, _C).store(gl.load(BIAS + j * _C + ic))
    par.slice(_PG, _C).store(gl.load(GAMMA + ic))
    par.slice(_PG + _C, _C).store(gl.load(BETA + ic))
    z_full = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    z_empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    w_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    for k in gl.static_range(S):
        mbarrier.init(z_full.index(k), count=1)
        mbarrier.init(z_empty.index(k), count=1)
    mbarrier.init(w_bar.index(0), count=1)
    fence_async_shared()
    gl.thread_barrier()
    gl.warp_specialize([
        (_consumer, (z_smem, w_smem, st0, par, z_full, z_empty, w_bar.index(0), a_desc, b_desc, g_desc, M, R, NN,
                     nprog, eps, 0, SIG, PIPE)),
        (_loader, (z_desc, w_desc, z_smem, w_smem, z_full, z_empty, w_bar.index(0), R, nprog)),
        (_consumer, (z_smem, w_smem, st1, par, z_full, z_empty, w_bar.index(0), a_desc, b_desc, g_desc, M, R, NN,
                     nprog, eps, 1, SIG, PIPE)),
    ], [1, 4], [LOAD_REGS, CONS_REGS])




BLOCK = "trimul_block"
DEFAULT = dict(S=2, STB=2, SIG=1, PIPE=True, LOAD_REGS=24, CONS_REGS=240)


def _layouts():
    return dict(z=gl.NVMMASharedLayout.get_default_for([BR, C_WIDTH], gl.bfloat16),
                w=gl.NVMMASharedLayout.get_default_for([C_WIDTH, NB], gl.bfloat16),
                st=gl.NVMMASharedLayout.get_default_for([BR, NB], gl.bfloat16))


def smem_bytes(S: int, STB: int) -> int:
    """Shared memory the kernel allocates (before the compiler's own scratch and alignment)."""
    return 2 * (S * BR * C_WIDTH + 5 * C_WIDTH * C_WIDTH + 2 * STB * BR * NB) + 8 * (2 * S + 1)


def first_kernel(z, mask, gamma, beta, w_in, b_in, a_out, b_out, g_out, eps, num_sms=None, **config):
    """The rule's first kernel's outputs into a_out, b_out [B, H, N, N] and g_out [B*N*N, C] (bf16, contiguous).
    z [B, N, N, C] or [N, N, C] bf16, mask [B, N, N] (0/1), gamma/beta [C], w_in [C, 4H + C], b_in [4H + C]."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    c = dict(DEFAULT, **config)
    unknown = set(c) - set(DEFAULT)
    if unknown:
        raise MageInputError(BLOCK, "config", f"has keys this kernel does not take: {sorted(unknown)}")
    if z.dtype != torch.bfloat16:
        raise MageInputError(BLOCK, "z", f"must be bf16 on this kernel, got {z.dtype}")
    C = z.shape[-1]
    N = z.shape[-2]
    B = z.shape[0] if z.dim() == 4 else 1
    if z.dim() not in (3, 4) or z.shape[-3] != N:
        raise MageInputError(BLOCK, "z", f"must be [B, N, N, C] or [N, N, C], got {tuple(z.shape)}")
    if mask.numel() != B * N * N or tuple(mask.shape[-2:]) != (N, N):
        raise MageInputError(BLOCK, "mask", f"must be [B, N, N] with z's B and N, got {tuple(mask.shape)}")
    H = (w_in.shape[1] - C) // 4
    if C != C_WIDTH or H != C_WIDTH or tuple(w_in.shape) != (C, 4 * H + C) or b_in.numel() != 4 * H + C:
        raise MageInputError(BLOCK, "w_in", f"must be [{C_WIDTH}, {5 * C_WIDTH}] (C = H = {C_WIDTH} only), got "
                             f"{tuple(w_in.shape)} with C = {C}")
    NN, R = N * N, B * N * N
    if NN % 8 or NN < BR:
        raise MageInputError(BLOCK, "z", f"N^2 must be a multiple of 8 (TMA's 16-byte rows of a and b) and at least "
                             f"{BR}, got N = {N}")
    if c["S"] % 2:  # the consumers take alternate tiles, so each owns the stages of its parity: an odd count would let
        # a consumer's first wait pass on a fresh stage's barrier before its tile arrived
        raise MageInputError(BLOCK, "config", f"S (z's stages) must be even, got {c['S']}")
    if c["S"] * BR * C * 2 + 5 * C * C * 2 + 2 * c["STB"] * BR * NB * 2 > 227 * 1024:
        raise MageInputError(BLOCK, "config", f"S = {c['S']} and STB = {c['STB']} ask more than 227 KB of shared memory")
    for t, shape in ((a_out, (B, H, N, N)), (b_out, (B, H, N, N)), (g_out, (R, C))):
        if t.dtype != torch.bfloat16 or not t.is_contiguous() or t.numel() != R * C or t.data_ptr() % 16:
            raise MageInputError(BLOCK, "out", f"a, b and g must be contiguous 16-byte-aligned bf16 {shape}")
    zc = z.reshape(R, C).contiguous()
    m = mask.reshape(R).to(torch.bfloat16).contiguous()  # as the launcher: the mask in the stored dtype
    gi, bi = gamma.to(torch.bfloat16).contiguous(), beta.to(torch.bfloat16).contiguous()
    wi, bb = w_in.to(torch.bfloat16).contiguous(), b_in.to(torch.bfloat16).contiguous()
    L = _layouts()
    z_desc = TensorDescriptor(zc, [R, C], [C, 1], [BR, C], L["z"])
    w_desc = TensorDescriptor(wi, [C, 4 * H + C], [4 * H + C, 1], [C, NB], L["w"])
    a_desc = TensorDescriptor(a_out.view(B * H, NN), [B * H, NN], [NN, 1], [NB, BR], L["st"])
    b_desc = TensorDescriptor(b_out.view(B * H, NN), [B * H, NN], [NN, 1], [NB, BR], L["st"])
    g_desc = TensorDescriptor(g_out.view(R, C), [R, C], [C, 1], [BR, NB], L["st"])
    if num_sms is None:
        num_sms = torch.cuda.get_device_properties(z.device).multi_processor_count
    tiles = triton.cdiv(R, BR)
    nprog = min(num_sms, tiles)
    first_in_kernel[(nprog,)](z_desc, w_desc, a_desc, b_desc, g_desc, m, gi, bi, bb, R, NN, nprog, float(eps),
                              num_warps=4, **c)
    return a_out, b_out, g_out


