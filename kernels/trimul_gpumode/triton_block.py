"""The task's form of the triangle update assembled from the project's Triton kernels, the same pieces
the AlphaFold form's column (kernels/trimul_block) is built from:

1. LayerNorm of x (the project's LayerNorm, rows of D channels, the batch's B N^2 pairs in one launch);
2. the five projections as one GEMM, p = xn W^T with W = [left gate; left value; right gate; right
   value; out gate] ([5H, D], Linear's layout: already K-major, so no copy) by the GEMM with the
   fused epilogue (tf32x3 at fp32), p [B N^2, 5H];
3. per complex, the AlphaFold column's gate kernel (a and b, gated and masked, written channel-major)
   and the triangle's batched GEMM, o [B, N, N, H]: p's first 4H columns are laid out as its w_in's;
4. LayerNorm of o over H;
5. the out gate, LN(o) *= sigmoid(p[:, 4H:]), in place by the AlphaFold column's output-gate kernel.
   The gate multiplies before the output projection here, so the GEMM epilogue's gate (which gates
   the product) cannot take it: it is one elementwise pass over [B N^2, H];
6. the output projection, out = LN(o) W_o^T, the epilogue GEMM again.

The weights are bias-free; the GEMM reads a bias, so ``prepare`` stacks the weights and makes zero
biases once per input set (as a model would store them), outside the timed call. ``trimul_gpumode``
takes the task's twelve arguments and does both on every call.

On Hopper cards the config's ``GEMM='hopper_gated'`` makes steps 2 and 3 one launch a complex, as in the
AlphaFold column (``kernels/trimul_block/_gated_in``): the first GEMM's epilogue writes a and b channel-major and
the out gate's H columns, so p is never written; elsewhere that config runs the road above.

``ROAD='fused'`` runs the AlphaFold column's three launches (``kernels/trimul_block/_fused``) where D == H: at those
widths the task's weights are that block's, transposed (w_in [D, 5H] with the out gate's H = D columns last, w_out
[H, D]), its biases zero, and the last kernel gates LN(o) before the output projection (``gate_first``). Elsewhere
(D != H, the contest's D = 384 and 768) a fused config is refused by name; the rule gives it only where it holds.

Precisions as the AlphaFold column's: fp32 (tf32x3 GEMMs, the contraction in IEEE FP32 on the FMA
units) and bf16 (bf16 storage between the kernels, FP32 inside each). Under the interpreter the
kernels store FP32 and PyTorch rounds each intermediate to bf16, to nearest even, where the GPU's
kernels would (Triton 3.6's interpreter truncates instead).
"""
from __future__ import annotations

import torch

from kernels._pytorch import set_precision
from kernels._triton import TileTable, common, register_kernel
from kernels.layernorm.triton_kernel import layernorm
from kernels.matmul.triton_epilogue import gemm_epilogue
from kernels.trimul_block import _fused, _gated_in
from kernels.trimul_block._fused_weights import _cached
from kernels.trimul_block import _projections as proj
from kernels.trimul_block import triton_block as af3
from kernels.trimul_block import tiles as af3_tiles
from mage import ops
from mage.errors import MageInputError

from .spec import NAME, SPEC

PREPARED = ("x", "mask", "norm_w", "norm_b", "w_in", "b_in", "out_norm_w", "out_norm_b", "to_out", "b_out")


# the first projection's roads: the epilogue GEMM, or on Hopper the gated one (``GEMM``; the block's names)
ROADS = ("fused", "hopper_gated")


def _config(contraction: dict, gemm=(64, 128, 32, 4, 4), gate=(64, 32, 4), ln=(8, 4, 1), out_gate=(32, 64, 4),
            contract="ieee", tma=0, road="fused", gated="", fused=None) -> dict:
    """A config; ``contract='tf32x3'``: the FP32 contraction on the tensor cores (as the AlphaFold column's);
    ``tma``: that contraction by the persistent TMA kernel where the card and N allow (``CONTRACT_TMA``, as there);
    ``road``: the first projection's (``ROADS``; ``gemm``, the epilogue GEMM's tiles, serve the second and, off
    Hopper, the first); ``gated``: the gated GEMM's tiles by name (``GATED_TILES``, as the AlphaFold column's);
    ``fused``: the fused road's keys (``_fused.keys``; None: ROAD='steps', the road above, or the gated one)."""
    tri = {k: contraction[k] for k in af3_tiles.TRIANGLE_KEYS}
    bm, bn, bk, warps, stages = gemm
    return dict(tri, GATE_V=gate[0], GATE_H=gate[1], GATE_WARPS=gate[2], LN_BLOCK_R=ln[0], LN_WARPS=ln[1],
                LN_EVICT=ln[2], OUT_R=out_gate[0], OUT_C=out_gate[1], OUT_WARPS=out_gate[2], GEMM=road,
                GATED_TILES=gated, GEMM_M=bm, GEMM_N=bn, GEMM_K=bk, GEMM_WARPS=warps, GEMM_STAGES=stages, CONTRACT=contract,
                CONTRACT_TMA=tma, **(fused or _fused.keys(road_name="steps")))


# Predictions until a GPU sweep. The contest's shapes (H = 128; D 128, 384 or 768; N 256-1024) are the
# AlphaFold column's at C = 128 but for D, so its measured choices start here: at fp32 its best
# projections (tf32x3, 64x128x32 tiles; its sweep at N = 128) and its base contraction; at bf16 its
# tensor-core contraction and the bf16 epilogue GEMM's 128x128x64 tiles (the block's bf16 sweep
# preferred cuBLAS, which this column does not use). Both GEMMs have K = D or H and N = 5H or D, all
# multiples of 128, so one tile serves every contest D; the rest of each sweep varies the GEMM tiles
# and the contraction's epilogue.
_FP32_TRI = af3_tiles.TRIANGLE_TILES["fp32"]["permute_128x64x16_c1_w4_s3_ij"]
_FP32 = {
    "m64_n128_k32_w4_s4": _config(_FP32_TRI),
    "m128_n64_k32_w4_s4": _config(_FP32_TRI, gemm=(128, 64, 32, 4, 4)),
    "m128_n128_k32_w8_s3": _config(_FP32_TRI, gemm=(128, 128, 32, 8, 3)),
    "m64_n128_k32_w4_s4_direct": _config(dict(_FP32_TRI, STORE="direct", BLOCK_I=64, BLOCK_J=64, BLOCK_C=4,
                                              num_warps=8)),
    # the contraction as three TF32 tensor-core products (FP32 accuracy), as the AlphaFold column from N = 256
    "m64_n128_k32_w4_s4_x3": _config(af3_tiles.TRIANGLE_TILES["fp32x3"]["permute_128x64x32_c1_w4_s4"], contract="tf32x3"),
    # the AlphaFold column's FP32 rule (its gated first GEMM, the contraction by TMA with matmul's Hopper fp32x3
    # tiles): there 15-17% faster than the x3 config on an H100
    "gated_x3_tma_128x128x64_w8_s3": _config(af3_tiles.TILES["fp32"]["hopper_gated_x3_tma_128x128x64_w8_s3"],
                                             contract="tf32x3", tma=1, road="hopper_gated"),
    # and its GEMM's tile loop flattened into the K loop (as the AlphaFold column's '_fl'; unmeasured)
    "gated_x3_tma_128x128x64_w8_s3_fl": _config(af3_tiles.TILES["fp32"]["hopper_gated_x3_tma_128x128x64_w8_s3"],
                                                contract="tf32x3", tma=1, road="hopper_gated",
                                                gated="m128_n128_k32_w8_s4_ps_fl"),
}
_BF16_TRI = af3_tiles.TILES["bf16"]["cublas_permute_128x128"]
_AF3_BF16_RULE = af3_tiles.TILES["bf16"]["fused_r64_h32_tma2_r64_fsig_ab_g64_cublas"]
_BF16 = {
    "m128_n128_k64_w8_s3": _config(_BF16_TRI, gemm=(128, 128, 64, 8, 3)),
    "m128_n64_k64_w4_s4": _config(_BF16_TRI, gemm=(128, 64, 64, 4, 4)),
    "m128_n128_k64_w8_s3_direct_c8": _config(af3_tiles.TILES["bf16"]["cublas_direct_64x64_c8"], gemm=(128, 128, 64, 8, 3)),
    # the AlphaFold column's bf16 rule, its fused road (three launches: the first kernel, cuBLAS's batched GEMM, the
    # last kernel), with the out gate before the output projection; D == H only. On an H100 (D = H = 128) 1,282-1,285
    # us against the steps road's 3,100 at N = 1024, 87.8 against 185.8 at 256 (data/h100/fused/probe_task_a6f663d.txt)
    "fused_ab_g64_cublas": _config(_BF16_TRI, gemm=(128, 128, 64, 8, 3),
                                   fused={k: _AF3_BF16_RULE[k] for k in _fused.keys()}),
}
# bf16: the fused road where it holds (D == H) from N = 256, as the AlphaFold column's bf16 rule
FUSABLE = lambda s: s["D"] == s["H"] and af3_tiles.FUSABLE(dict(s, C=s["D"]))  # noqa: E731
# fp32: from N = 256 the gated first GEMM and the contraction by TMA (off Hopper the x3 config's roads): on an H200
# (ad466b4's probe, D = H = 128) 7.22 ms against 8.96 at N = 1024 and 358 us against 437 at N = 256
TILES = {"fp32": TileTable(NAME, _FP32, base="m64_n128_k32_w4_s4", rule=(("gated_x3_tma_128x128x64_w8_s3", af3_tiles.AF3_CLASS),)),
         "bf16": TileTable(NAME, _BF16, base="m128_n128_k64_w8_s3", rule=(("fused_ab_g64_cublas", FUSABLE),))}


def _refuse_bad_config(c: dict) -> None:
    if c["STORE"] not in af3.STORES:
        raise MageInputError(NAME, "config", f"STORE must be one of {af3.STORES}, got {c['STORE']!r}")
    if c["GEMM"] not in ROADS:
        raise MageInputError(NAME, "config", f"GEMM must be one of {ROADS}, got {c['GEMM']!r}")
    for key in ("BLOCK_I", "BLOCK_J", "BLOCK_K", "BLOCK_C", "GATE_V", "GATE_H", "LN_BLOCK_R", "OUT_R", "OUT_C",
                "GEMM_M", "GEMM_N", "GEMM_K"):
        if c[key] < 1 or c[key] & (c[key] - 1):
            raise MageInputError(NAME, "config", f"{key} must be a power of two, got {c[key]}")


def launches(config: dict) -> int:
    """Kernel launches per call of one complex on the current device: two LayerNorms, two GEMMs, the gates (in
    the first GEMM on the 'hopper_gated' road), the batched GEMM, the transposing copy with the 'permute' epilogue,
    and the out gate (a batch of B complexes makes the gates, the batched GEMM and the copy B times); the fused
    road's three."""
    if config["ROAD"] == "fused":
        return _fused.launches(config)
    return 7 + (config["STORE"] == "permute") - (proj.road(config) == "hopper_gated")


def fused_limits(c: dict, shape: dict):
    """Why config ``c`` cannot take ``shape``: the fused road runs the task's form only where D == H (the out
    gate's H columns are then the AlphaFold form's C), at most ``_fused.MAX_WIDTH`` channels; else None."""
    if c["ROAD"] != "fused":
        return None
    D, H = shape["D"], shape["H"]
    if D != H or H > _fused.MAX_WIDTH:
        return f"ROAD='fused' takes the task's form where D == H <= {_fused.MAX_WIDTH}, not D = {D}, H = {H}"
    if c["FIN_ZGATE"] or c["FIN_PIPE"]:
        return "ROAD='fused' gates LN(o) in the grid's last kernel: FIN_ZGATE and FIN_PIPE are the AlphaFold form's"
    return None


def prepare(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate,
            out_norm_w, out_norm_b, to_out, **config):
    """The task's arguments checked (named errors) and laid out for the kernels: the five projections
    stacked [5H, D] in the gate kernel's order, zero biases for the GEMMs. ``config`` is the variant's
    (nothing here depends on it)."""
    SPEC.validate(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate,
                  out_norm_w, out_norm_b, to_out)
    w_in = torch.cat([left_gate, left_proj, right_gate, right_proj, out_gate], dim=0).contiguous()
    b_in = torch.zeros(w_in.shape[0], dtype=x.dtype, device=x.device)
    b_out = torch.zeros(to_out.shape[0], dtype=x.dtype, device=x.device)
    return x, mask, norm_w, norm_b, w_in, b_in, out_norm_w, out_norm_b, to_out.contiguous(), b_out


def _checked(x, mask, norm_w, norm_b, w_in, b_in, out_norm_w, out_norm_b, to_out, b_out) -> None:
    """The prepared arguments' checks on every call (the task's were made in ``prepare``): that they
    are prepare's output for one input set, and readable by the kernels."""
    named = dict(zip(PREPARED, (x, mask, norm_w, norm_b, w_in, b_in, out_norm_w, out_norm_b, to_out, b_out)))
    if x.dim() != 4 or mask.dim() != 3:
        raise MageInputError(NAME, "x", "the prepared x must be [B, N, N, D] and its mask [B, N, N]")
    H, D = out_norm_w.shape[0], x.shape[3]
    if tuple(w_in.shape) != (5 * H, D) or tuple(b_in.shape) != (5 * H,) or tuple(b_out.shape) != (D,):
        raise MageInputError(NAME, "w_in", "must be the stacked projections [5H, D] with zero biases: pass "
                                           "the task's arguments through prepare")
    common.on_device(NAME, named)


def trimul_gpumode_prepared(x, mask, norm_w, norm_b, w_in, b_in, out_norm_w, out_norm_b, to_out, b_out, out=None,
                            **config):
    """The update on ``prepare``'s output; ``config`` overrides the tiles."""
    _checked(x, mask, norm_w, norm_b, w_in, b_in, out_norm_w, out_norm_b, to_out, b_out)
    B, N, D = x.shape[0], x.shape[1], x.shape[3]
    H = out_norm_w.shape[0]
    ops.check_out(NAME, out, tuple(x.shape), x.dtype, x.device)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    if N == 0 or B == 0:
        return out
    # the dtype the kernels store: FP32 under the interpreter for bf16 inputs (see the docstring)
    sdt = torch.float32 if x.dtype == torch.bfloat16 and common.interpreting() else x.dtype
    near = af3._nearest
    consts, launch = common.split(TILES["fp32" if x.dtype == torch.float32 else "bf16"].choose(dict(N=N, D=D, H=H),
                                                                                              config))
    _refuse_bad_config(consts)
    af3.refuse_bad_contract(NAME, consts, x.dtype)
    proj.hopper_tiles(consts, "GATED_TILES", x.dtype, NAME)  # (a bad name refused before any launch)
    if consts["ROAD"] == "fused":
        why = fused_limits(consts, dict(D=D, H=H))
        if why:
            raise MageInputError(NAME, "config", why)
        _fused.refuse_bad_config(consts, D, H, x.element_size(), op=NAME)
        set_precision("fp32")  # cuBLAS's contraction in IEEE FP32 products, whatever an earlier call left set
        # the block's layout, made once while the prepared weights live: w_in [D, 5H], w_out [H, D]
        w_t = _cached(("task-in", id(w_in), w_in.dtype, w_in.device), (w_in,), lambda: w_in.t().contiguous())
        o_t = _cached(("task-out", id(to_out), to_out.dtype, to_out.device), (to_out,), lambda: to_out.t().contiguous())
        return _fused.update(x, mask, norm_w, norm_b, w_t, b_in, out_norm_w, out_norm_b, o_t, b_out, out, consts,
                             launch, sdt, gate_first=True)
    R = B * N * N
    ln_cfg = dict(BLOCK_R=consts["LN_BLOCK_R"], num_warps=consts["LN_WARPS"], EVICT=consts["LN_EVICT"])
    gemm_cfg = proj._tiles(consts)
    xn = near(layernorm(x.reshape(R, D).to(sdt), norm_w.to(sdt), norm_b.to(sdt), **ln_cfg), x.dtype)
    bn = _gated_in.block_n(H, 128) if proj.road(consts, x) == "hopper_gated" else 0
    if bn:  # a and b channel-major and the out gate's columns from one launch a complex (no p, no gate kernel)
        at, bt, g = _gated_in.project(xn, w_in, b_in, mask.reshape(B, N, N), N, H, consts, sdt, bn, linear=True,
                                      op=NAME)
        o, offs_64 = af3.contraction(near(at, x.dtype, keep=True), near(bt, x.dtype, keep=True), consts, launch, sdt,
                                     common.offsets_64(at, g, mask))
        g, g0 = near(g, x.dtype, keep=True), 0
    else:
        p = torch.empty((R, 5 * H), dtype=sdt, device=x.device)
        near(gemm_epilogue(xn, w_in, b_in, p, **gemm_cfg), x.dtype, keep=True)  # the five projections in one
        o, offs_64 = af3.gated_contraction(p, mask, N, H, consts, launch, x.dtype, sdt)
        g, g0 = p, 4 * H  # the out gate: p's last H columns
    on = layernorm(near(o, x.dtype, keep=True).view(R, H), out_norm_w.to(sdt), out_norm_b.to(sdt), **ln_cfg)
    near(on, x.dtype, keep=True)  # LN(o) as the GPU stores it, then gated and stored once more
    grid = (common.cdiv(R, consts["OUT_R"]), common.cdiv(H, consts["OUT_C"]))
    proj._out_gate_kernel[grid](g, on, R, H, g.stride(0), g0, BLOCK_R=consts["OUT_R"], BLOCK_C=consts["OUT_C"],
                                OFFS_64=offs_64, num_warps=consts["OUT_WARPS"])
    y = out.view(R, D) if sdt == x.dtype else torch.empty((R, D), dtype=sdt, device=x.device)
    gemm_epilogue(near(on, x.dtype), to_out, b_out, y, **gemm_cfg)
    if y.dtype != out.dtype:
        out.view(R, D).copy_(y)  # rounded to nearest even, once
    return out


def trimul_gpumode(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate,
                   out_norm_w, out_norm_b, to_out, out=None, **config):
    """The update on the task's twelve arguments (checked, stacked and given zero biases on every call)."""
    inputs = prepare(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate,
                     out_norm_w, out_norm_b, to_out)
    return trimul_gpumode_prepared(*inputs, out=out, **config)


for _dtype, _tiles in TILES.items():
    register_kernel(NAME, trimul_gpumode_prepared, _tiles, precision=_dtype, prepare=prepare, limits=fused_limits)


@torch.library.custom_op("mage::triton_trimul_gpumode", mutates_args=())
def trimul_gpumode_op(x: torch.Tensor, mask: torch.Tensor, norm_w: torch.Tensor, norm_b: torch.Tensor,
                      left_proj: torch.Tensor, right_proj: torch.Tensor, left_gate: torch.Tensor,
                      right_gate: torch.Tensor, out_gate: torch.Tensor, out_norm_w: torch.Tensor,
                      out_norm_b: torch.Tensor, to_out: torch.Tensor) -> torch.Tensor:
    """The update on the task's arguments as a PyTorch operator, so torch.compile graphs can call it."""
    return trimul_gpumode(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate,
                          out_norm_w, out_norm_b, to_out)


@trimul_gpumode_op.register_fake
def _(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate, out_norm_w, out_norm_b,
      to_out):
    SPEC.validate(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate, out_norm_w,
                  out_norm_b, to_out)  # metadata only
    return torch.empty_like(x)
