"""The Gluon first kernel's pieces (``_gluon_first``): its widths, the slots' weight blocks, the sigmoid,
the LayerNorm in the products' operand layout, a slot's two products and a staged TMA store."""
from __future__ import annotations

from triton.runtime.jit import constexpr_function
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma, warpgroup_mma

C_WIDTH = 128  # C (pair channels) and H (hidden channels): the only widths this kernel takes
BR = 64  # pairs a tile (a warpgroup's wgmma M)
NB = 64  # columns of a w_in block, and channels (or pairs) of a store staging tile
_C = gl.constexpr(C_WIDTH)
_BR = gl.constexpr(BR)
_NB = gl.constexpr(NB)
_NPAR = gl.constexpr(8 * C_WIDTH)  # b_in, gamma, beta (bf16) in one shared vector (a power of two: 2 KB)
_PG = gl.constexpr(5 * C_WIDTH)  # gamma's offset there (beta's: + C)




@constexpr_function
def _block(slot, k):
    # slot -> w_in's 64-column blocks: (0, 2) a's gate/value channels 0:64, (1, 3) 64:128, (4, 6), (5, 7) b's,
    # (8, 9) g's columns 0:64 and 64:128
    slot, k = int(slot), int(k)
    if slot == 4:
        return 8 + k
    return 4 * (slot // 2) + 2 * k + slot % 2


@constexpr_function
def _half(slot):
    return int(slot) % 2


@constexpr_function
def _is_a(slot):
    return int(slot) < 2


@gluon.jit
def _opaque_zero(t):
    # 0, computed from the loop-variant t in a way the compiler cannot fold (so nothing derived is hoisted)
    return gl.inline_asm_elementwise("mov.u32 $0, 0;", "=r,r", [t], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _sigmoid(x, SIG: gl.constexpr):
    # SIG 1: the rule's IN_SIG='fast': 1 / (1 + 2^(-x log2 e)) on the SFU approximations, subnormals flushed
    # (2 MUFU ops a value: with 384 sigmoids a pair, the SFU's 16 a clock an SM is a ~220 us floor at N = 1024);
    # 2: IN_SIG='tanh' (1 MUFU op, 2^-11 relative: not the rule's function bit for bit); 0: exact formula
    if SIG == 1:
        return gl.inline_asm_elementwise(
            "{ .reg .f32 t; mul.f32 t, $1, 0fBFB8AA3B; ex2.approx.ftz.f32 t, t; add.f32 t, t, 0f3F800000; "
            "rcp.approx.ftz.f32 $0, t; }", "=r,r", [x], dtype=gl.float32, is_pure=True, pack=1)
    elif SIG == 2:
        return gl.inline_asm_elementwise(
            "{ .reg .f32 t; mul.f32 t, $1, 0f3F000000; tanh.approx.f32 t, t; fma.rn.f32 $0, t, 0f3F000000, "
            "0f3F000000; }", "=r,r", [x], dtype=gl.float32, is_pure=True, pack=1)
    else:
        return 1.0 / (1.0 + gl.exp(-x))


@gluon.jit
def _layernorm(x, par, eps, layout: gl.constexpr):
    # _fused_rows._layernorm_rows at bf16 (CENTER=False, FAST=False): rows scaled by s = 2^-e, e the exponent of
    # their max |x| clamped to [0, 126] (the squares cannot overflow), deviations, 1 / sqrt(var + eps s^2)
    C: gl.constexpr = x.type.shape[1]
    amax = gl.max(gl.abs(x), axis=1)
    e = (amax.to(gl.int32, bitcast=True) >> 23) - 127
    e = gl.minimum(gl.maximum(e, 0), 126)
    s = ((127 - e) << 23).to(gl.float32, bitcast=True)
    xs = x * s[:, None]
    mean = gl.sum(xs, axis=1) / C
    d = xs - mean[:, None]
    var = gl.sum(d * d, axis=1) / C
    den = var + eps * s * s
    rstd = gl.where(den > 0, 1.0 / gl.sqrt(den), 0.0)
    # gamma, beta from the shared copy (immediate offsets: no address registers held across the tile loop)
    gamma = par.slice(_PG, C).load(gl.SliceLayout(0, layout)).to(gl.float32)
    beta = par.slice(_PG + C, C).load(gl.SliceLayout(0, layout)).to(gl.float32)
    return d * rstd[:, None] * gamma[None, :] + beta[None, :]


@gluon.jit
def _issue(zn, w_smem, J0: gl.constexpr, J1: gl.constexpr, zero, zo):
    # one slot: two [BR, 128] @ [128, 64] products, async (each call commits one wgmma group). ``zo`` is a zero
    # the compiler cannot see through: with constant block indices LLVM hoists all 80 wgmma descriptors (10 blocks
    # x 8 k-steps, 64-bit each) out of the tile loop, 160 registers, and ptxas spills them
    acc0 = warpgroup_mma(zn, w_smem.index(zo + J0), zero, use_acc=False, is_async=True)
    acc1 = warpgroup_mma(zn, w_smem.index(zo + J1), zero, use_acc=False, is_async=True)
    return acc0, acc1


@gluon.jit
def _stage_store(desc, buf, val, c0, c1, second, p1, TRANSPOSE: gl.constexpr, STB: gl.constexpr):
    # val [BR, 64] bf16 into the staging tile (transposed: [64 channels, BR pairs]), then TMA out at (c0, c1),
    # and with ``second`` once more at (c0 + H, p1) for a tile running into the next complex
    tma.store_wait(STB - 1)  # this buffer's previous store has read it (all but the newest STB - 1 groups done)
    gl.thread_barrier()  # ...seen by every warp before any overwrites it (the issuing thread waited)
    if TRANSPOSE:
        buf.permute((1, 0)).store(val)
    else:
        buf.store(val)
    fence_async_shared()  # generic-proxy writes -> visible to the TMA engine
    gl.thread_barrier()
    tma.async_copy_shared_to_global(desc, [c0, c1], buf)
    if second:
        tma.async_copy_shared_to_global(desc, [c0 + _C, p1], buf)
