"""The triangle update assembled from the project's kernels, as a kernel author would inside a block:

1. LayerNorm of z (the project's Triton LayerNorm, rows of C channels);
2. the five input projections as one GEMM, p = zn @ w_in + b_in ([N*N, 4H + C]);
3. one Triton launch for both gates and the mask, which writes a and b straight into the channel-major
   [H, N, N] copies that the triangle's channel-major road (kernels/triangle/_channel_major.py) would
   otherwise make with a transposing copy: here the layout costs nothing, the values are written once;
4. the triangle's batched GEMM over those copies (its kernel, its tiles; with the 'permute' epilogue
   also its transposing copy), giving o [N, N, H];
5. LayerNorm of o (the project's Triton LayerNorm, rows of H channels);
6. the output projection, written into ``out`` and gated, out *= sigmoid(p[:, 4H:]).
The projections (steps 2 and 6) take one of four roads, the config key ``GEMM`` (``_projections``):
cuBLAS GEMMs and a Triton launch for the output gate, or the project's GEMM with the biases and the
gate in its epilogue (tf32x3 at fp32), or that on matmul's Hopper road ('hopper'), or on Hopper cards
steps 2 and 3 as one GEMM whose epilogue writes a and b ('hopper_gated', ``_gated_in``: no p, no gate
launch). With the contraction's epilogue 'layernorm' (``STORE``) steps 4 and 5 meet without the copy: o
stays channel-major and the LayerNorm reads it there.

Precisions: fp32 and bf16, one launcher (the inputs' dtype picks its table in ``TILES``). At fp32 the
GEMMs stay on cuBLAS in IEEE FP32 (TF32 off, set on every call) and the contraction on the FMA units
("ieee" on FP32 tiles). At bf16 every tensor between the kernels is bf16 (zn, p, a and b, o, LN(o),
the output) and every kernel computes in FP32: LayerNorm statistics, the
sigmoid gates, cuBLAS's bf16 GEMMs and the contraction's ``tl.dot`` on bf16 tiles accumulate in FP32
(the tensor cores' bf16 product: "ieee" names no FP32 decomposition), each rounded once at its store.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels._pytorch import set_precision
from kernels._triton import common, register_kernel
from kernels.layernorm.triton_kernel import layernorm
from kernels.triangle import _channel_major as road
from kernels.triangle import _hopper as tma_road
from kernels.triangle.triton_kernel import STORES
from kernels.triangle.triton_kernel import TILES as TRIANGLE_TILES
from mage import ops
from mage.errors import MageInputError

from . import _fused, _gated_in
from . import _projections as proj
from .spec import ARGS, NAME, SPEC
from .tiles import FIRST, FIRST_BF16, TILES  # noqa: F401 - the tables live in tiles; tests read them here


# <kernel>
@triton.jit
def _gate_kernel(
    P, M, AT, BT,  # p [N*N, 4H + C] (rows are pairs i*N + k), the mask, a and b channel-major
    N, H, stride_p,
    sp_u, sp_v,  # p's row index of the pair (u, v) is u * sp_u + v * sp_v
    sm_u, sm_v,  # the mask's element offset of the pair (u, v)
    BLOCK_V: tl.constexpr,  # pairs a program takes, along v (one u)
    BLOCK_H: tl.constexpr,  # channels a program takes
    OFFS_64: tl.constexpr,
):
    # The copies are [H, N(u), N(v)] with v innermost, whichever of i and k the triangle kernel wants
    # innermost (the launcher chooses which of them is u), so a program writes runs of BLOCK_V
    # contiguous values per channel while it reads runs of BLOCK_H contiguous channels per pair.
    pid = tl.program_id(0)
    v_blocks = tl.cdiv(N, BLOCK_V)
    u = pid // v_blocks
    vs = (pid % v_blocks) * BLOCK_V + tl.arange(0, BLOCK_V)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    if OFFS_64:
        u = u.to(tl.int64)
        vs = vs.to(tl.int64)
        hs = hs.to(tl.int64)
    vmask = vs < N
    mask = vmask[:, None] & (hs < H)[None, :]
    # bf16 storage: the gates in FP32, rounded once at the store (no-op conversions at FP32)
    m = tl.load(M + u * sm_u + vs * sm_v, mask=vmask, other=0.0).to(tl.float32)
    p = P + (u * sp_u + vs * sp_v)[:, None] * stride_p + hs[None, :]
    a_gate = tl.load(p, mask=mask, other=0.0).to(tl.float32)
    a_val = tl.load(p + H, mask=mask, other=0.0).to(tl.float32)
    b_gate = tl.load(p + 2 * H, mask=mask, other=0.0).to(tl.float32)
    b_val = tl.load(p + 3 * H, mask=mask, other=0.0).to(tl.float32)
    a = tl.sigmoid(a_gate) * a_val * m[:, None]
    b = tl.sigmoid(b_gate) * b_val * m[:, None]
    dst = hs[None, :] * N * N + u * N + vs[:, None]
    tl.store(AT + dst, a, mask=mask)
    tl.store(BT + dst, b, mask=mask)


# </kernel>


# The contraction's epilogues: the triangle's two, and 'layernorm': o stays channel-major ([H, N, N] a complex, as
# 'permute' writes it before its transposing copy) and the second LayerNorm reads it there, so the copy (a read
# and a write of o) is not made
BLOCK_STORES = STORES + ("layernorm",)


def _refuse_bad_config(c: dict) -> None:
    def no(why):
        raise MageInputError(NAME, "config", why)
    if c["STORE"] not in BLOCK_STORES or (c["STORE"] == "layernorm" and c["ROAD"] == "fused"):
        no(f"STORE must be one of {BLOCK_STORES} ('layernorm' on the steps road), got {c['STORE']!r}")
    if c["GEMM"] not in proj.ROADS:
        no(f"GEMM must be one of {proj.ROADS}, got {c['GEMM']!r}")
    if c["CONTRACT_TMA"] not in (0, 1) or (c["CONTRACT_TMA"] and c["ROAD"] == "fused" and c["BMM"] != "triton"):
        no(f"CONTRACT_TMA (0 or 1) is the Triton contraction by TMA: the steps road's, or the fused road's with "
           f"BMM='triton'; got {c['CONTRACT_TMA']!r} with ROAD={c['ROAD']!r}, BMM={c['BMM']!r}")
    for key in ("BLOCK_I", "BLOCK_J", "BLOCK_K", "BLOCK_C", "GATE_V", "GATE_H", "LN_BLOCK_R", "OUT_R", "OUT_C",
                "GEMM_M", "GEMM_N", "GEMM_K"):
        if c[key] < 1 or c[key] & (c[key] - 1):
            no(f"{key} must be a power of two, got {c[key]}")


def refuse_bad_contract(op: str, c: dict, dtype) -> None:
    """The contraction's precision (``CONTRACT``) must be 'ieee' or 'tf32x3', and 'ieee' at bf16: tf32x3
    splits FP32 operands only. Both forms of the update check it here, naming themselves."""
    if c["CONTRACT"] not in ("ieee", "tf32x3"):
        raise MageInputError(op, "config", f"CONTRACT must be 'ieee' or 'tf32x3', got {c['CONTRACT']!r}")
    if dtype == torch.bfloat16 and c["CONTRACT"] != "ieee":
        raise MageInputError(op, "config", f"CONTRACT={c['CONTRACT']!r} is for FP32 inputs; bf16 takes 'ieee'")


def launches(config: dict) -> int:
    """Kernel launches per call of one complex on the current device: two LayerNorms, the gates (in the first
    projection on the 'hopper_gated' road), the batched GEMM, the transposing copy with the 'permute' epilogue,
    and the projections' (a batch of B complexes makes the gates, the GEMM and the copy B times)."""
    if config["ROAD"] == "fused":
        return _fused.launches(config)
    return 4 + (config["STORE"] == "permute") + proj.launches(config) - (proj.road(config) == "hopper_gated")


def trimul_block(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out, out=None, **config):
    """The triangle update (outgoing edges) on FP32 or bf16 inputs, one complex z [N, N, C] or a batch
    [B, N, N, C] of them (mask [B, N, N]); ``config`` overrides the tiles."""
    inputs = (z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out)
    SPEC.validate(*inputs)
    common.on_device(NAME, dict(zip(ARGS, inputs)))
    N, C = z.shape[-3], z.shape[-1]
    B = z.shape[0] if z.dim() == 4 else 1
    H = gamma_out.shape[0]
    ops.check_out(NAME, out, tuple(z.shape), z.dtype, z.device)
    out = torch.empty(z.shape, dtype=z.dtype, device=z.device) if out is None else out
    if N == 0 or B == 0:
        return out
    # The dtype the Triton kernels store. Triton 3.6's interpreter converts FP32 to bf16 by cutting the
    # mantissa (round toward zero, at every store and .to()), where the GPU rounds to nearest even: twice
    # the error, all of one sign, at each of the five bf16 stores the kernels make. Under the interpreter
    # the kernels therefore store FP32 (their math is FP32 anyway) and PyTorch rounds each intermediate
    # once to nearest even (_nearest): the values the GPU stores, at the same points.
    sdt = torch.float32 if z.dtype == torch.bfloat16 and common.interpreting() else z.dtype
    tiles = TILES["fp32" if z.dtype == torch.float32 else "bf16"]
    consts, launch = common.split(tiles.choose(dict(N=N, C=C, H=H), config))
    _refuse_bad_config(consts)
    refuse_bad_contract(NAME, consts, z.dtype)
    for key in ("GATED_TILES", "OUT_TILES"):  # (a bad name refused before any launch)
        proj.hopper_tiles(consts, key, z.dtype)
    _fused.refuse_bad_config(consts, C, H, z.element_size())
    set_precision("fp32")  # IEEE FP32 GEMMs, whatever an earlier TF32 call left set
    if consts["ROAD"] == "fused":
        return _fused.update(*inputs, out, consts, launch, sdt)
    # The per-pair steps (both LayerNorms, both projections, the output gate) take the batch's B N^2
    # pairs as rows in one launch each; the gates and the contraction run once per complex.
    R = B * N * N
    mask = mask.reshape(B, N, N)
    ln_cfg = dict(BLOCK_R=consts["LN_BLOCK_R"], num_warps=consts["LN_WARPS"], EVICT=consts["LN_EVICT"])
    zn = _nearest(layernorm(z.reshape(R, C).to(sdt), gamma_in.to(sdt), beta_in.to(sdt), **ln_cfg), z.dtype)
    bn = _gated_in.block_n(H, 128) if proj.road(consts, z) == "hopper_gated" else 0
    if bn:  # a and b channel-major and g from one launch a complex (no p, no gate kernel)
        at, bt, g = _gated_in.project(zn, w_in, b_in, mask, N, H, consts, sdt, bn)
        o, offs_64 = contraction(_nearest(at, z.dtype, keep=True), _nearest(bt, z.dtype, keep=True), consts, launch,
                                 sdt, common.offsets_64(at, g, mask))
        g = _nearest(g, z.dtype, keep=True)
    else:
        p = _nearest(proj.project_in(zn, w_in, b_in, consts, sdt), z.dtype, keep=True)  # [R, 4H + C]: five in one
        o, offs_64 = gated_contraction(p, mask, N, H, consts, launch, z.dtype, sdt)
        g = p[:, 4 * H:]
    if consts["STORE"] == "layernorm":  # o [B, H, N, N]: each complex's pairs read as [N^2, H] in place
        on = torch.empty((R, H), dtype=sdt, device=z.device)
        for c in range(B):
            layernorm(_nearest(o[c], z.dtype, keep=True).view(H, N * N).t(), gamma_out.to(sdt), beta_out.to(sdt),
                      out=on[c * N * N:(c + 1) * N * N], **ln_cfg)
    else:
        on = layernorm(_nearest(o, z.dtype, keep=True).view(R, H), gamma_out.to(sdt), beta_out.to(sdt), **ln_cfg)
    # (under the interpreter y is an FP32 buffer: the bf16 projection is gated in FP32, then rounded once)
    y = out.view(R, C) if sdt == z.dtype else torch.empty((R, C), dtype=sdt, device=z.device)
    proj.project_out(_nearest(on, z.dtype), w_out, b_out, g, y, consts, offs_64)
    if y.dtype != out.dtype:
        out.view(R, C).copy_(y)  # rounded to nearest even, once
    return out


def gated_contraction(p, mask, N: int, H: int, consts: dict, launch: dict, dtype, sdt):
    """(o [B, N, N, H], whether offsets need 64 bits): per complex, the gate kernel makes a and b from
    p's first 4H columns (left gate, left value, right gate, right value; rows are the B N^2 pairs) and
    the mask [B, N, N], then the triangle's batched GEMM contracts them. The task's form of the update
    (kernels/trimul_gpumode) calls this too. ``sdt``: the dtype the kernels store (see trimul_block)."""
    B = mask.shape[0]
    at = torch.empty((B, H, N, N), dtype=sdt, device=p.device)
    bt = torch.empty((B, H, N, N), dtype=sdt, device=p.device)
    offs_64 = common.offsets_64(p, at, mask) or p.numel() >= common.INT32_LIMIT
    # K_INNER: the copies hold [c, i, k] (k innermost, as the tensor cores read), else [c, k, i]
    if consts["K_INNER"]:
        sp, sm = (N, 1), (mask.stride(1), mask.stride(2))  # u = i, v = k
    else:
        sp, sm = (1, N), (mask.stride(2), mask.stride(1))  # u = k, v = i
    grid = (N * common.cdiv(N, consts["GATE_V"]), common.cdiv(H, consts["GATE_H"]))
    for c in range(B):
        _gate_kernel[grid](p[c * N * N:], mask[c], at[c], bt[c], N, H, p.stride(0), *sp, *sm,
                           BLOCK_V=consts["GATE_V"], BLOCK_H=consts["GATE_H"], OFFS_64=offs_64,
                           num_warps=consts["GATE_WARPS"])
    # (under the interpreter a and b stay FP32 tensors holding bf16 values: the contraction multiplies
    # FP32 tiles there, see _contract)
    return contraction(_nearest(at, dtype, keep=True), _nearest(bt, dtype, keep=True), consts, launch, sdt, offs_64)


def contraction(at, bt, consts: dict, launch: dict, sdt, offs_64: bool):
    """(o [B, N, N, H], or channel-major [B, H, N, N] with STORE='layernorm'; whether offsets need 64 bits): the
    contraction of each complex's channel-major a and b ([B, H, N, N] each, any strides between complexes)."""
    B, H, N, _ = at.shape
    if consts["STORE"] == "layernorm":
        o = torch.empty((B, H, N, N), dtype=sdt, device=at.device)
        offs_64 = offs_64 or common.offsets_64(o)
        for c in range(B):
            _contract(at[c], bt[c], None, o[c], consts, launch, offs_64)
        return o, offs_64
    o = torch.empty((B, N, N, H), dtype=sdt, device=at.device)
    scratch = None if consts["STORE"] == "direct" else torch.empty((H, N, N), dtype=sdt, device=at.device)
    offs_64 = offs_64 or common.offsets_64(o)
    for c in range(B):
        _contract(at[c], bt[c], o[c], scratch, consts, launch, offs_64)
    return o, offs_64


def _nearest(t: torch.Tensor, dtype: torch.dtype, keep: bool = False) -> torch.Tensor:
    """t rounded to ``dtype`` to nearest even (nothing to do where a kernel stored ``dtype`` itself):
    a new ``dtype`` tensor, or with ``keep`` the rounded values in t's own FP32 buffer."""
    if t.dtype == dtype:
        return t
    return t.copy_(t.to(dtype)) if keep else t.to(dtype)


# The pointer kernel's tiles where a TMA config cannot take the TMA kernel: the triangle's fp32x3 base (the FP32
# rule's contraction before the TMA kernel), 128x64x32 at four stages
_POINTER_TILES = common.split({k: TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"][k]
                               for k in ("BLOCK_I", "BLOCK_J", "BLOCK_K", "GROUP_I", "num_warps", "num_stages")})


def _contract(at, bt, o, scratch, consts, launch, offs_64) -> None:
    """o = the triangle contraction of the channel-major copies: the triangle's batched GEMM and, with
    the 'permute' epilogue, its transposing copy (the second half of road.channel_major, whose first
    half, the copy of A and B, the gate kernel has already done); o None: the result stays in ``scratch``
    (the 'layernorm' epilogue)."""
    H, N, _ = at.shape
    view = o if scratch is None else scratch.permute(1, 2, 0)  # (i, j, c) strides either way
    if at.dtype == torch.bfloat16 and common.interpreting():
        # Triton 3.6's interpreter multiplies bf16 tiles as their raw 16-bit patterns; the FP32 product
        # of two bf16 values is exact, so FP32 copies give the sums the tensor cores form (the block
        # passes FP32 tensors of bf16 values there already; this keeps _contract right on its own)
        at, bt = at.float(), bt.float()
    if consts["CONTRACT_TMA"]:
        if tma_road.ready(at, bt):
            tma_road.contract(at, bt, view, consts, launch, offs_64)
            if scratch is not None and o is not None:
                road.transpose([(view, o)], N, H, offs_64)
            return
        # no TMA on the card, or N not a multiple of 4 at FP32: the pointer kernel, with tiles that fit the shared
        # memory of cards without TMA (the TMA configs' 128x128x64 at three stages would take 192 KB there)
        consts, launch = dict(consts, **_POINTER_TILES[0]), dict(launch, **_POINTER_TILES[1])
    bc = consts["BLOCK_C"]
    grid = (common.cdiv(N, consts["BLOCK_I"]) * common.cdiv(N, consts["BLOCK_J"]) * common.cdiv(H, bc),)
    road._batched_gemm_kernel[grid](at, bt, view, N, H, *view.stride(),
                                    BLOCK_I=consts["BLOCK_I"], BLOCK_J=consts["BLOCK_J"], BLOCK_K=consts["BLOCK_K"],
                                    BLOCK_C=bc, GROUP_I=consts["GROUP_I"], K_INNER=consts["K_INNER"],
                                    PRECISION=consts["CONTRACT"], OFFS_64=offs_64, **launch)
    if scratch is not None and o is not None:
        road.transpose([(view, o)], N, H, offs_64)


for _dtype, _tiles in TILES.items():
    register_kernel(NAME, trimul_block, _tiles, precision=_dtype,
                    limits=functools.partial(_fused.config_limits, itemsize=2 if _dtype == "bf16" else 4))


@torch.library.custom_op("mage::triton_trimul_block", mutates_args=())
def trimul_block_op(z: torch.Tensor, mask: torch.Tensor, gamma_in: torch.Tensor, beta_in: torch.Tensor,
                    w_in: torch.Tensor, b_in: torch.Tensor, gamma_out: torch.Tensor, beta_out: torch.Tensor,
                    w_out: torch.Tensor, b_out: torch.Tensor) -> torch.Tensor:
    """The block as a PyTorch operator, so torch.compile graphs can call it."""
    return trimul_block(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out)


@trimul_block_op.register_fake
def _(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out):
    SPEC.validate(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out)  # metadata only
    return torch.empty_like(z)
