"""The triangle update's two projections, by one of two roads (the config key ``GEMM``):

'cublas': p = zn w_in + b_in and y = LN(o) w_out + b_out as cuBLAS GEMMs (IEEE FP32 at fp32, TF32 off),
then one Triton launch for the output gate, y *= sigmoid(p[:, 4H:]), in place.

'fused': both as the project's GEMM with its epilogue (``kernels.matmul.triton_epilogue``): the biases
ride in the epilogues and the output gate in the second one, so y is written once, gated, and the
gate's launch and its pass over y (read and write) are gone. At fp32 the products are tf32x3 (FP32
accuracy on the tensor cores), the reason this road can beat cuBLAS's SGEMM, which at these shapes
(K = C = 128, hundreds of thousands of rows) is most of the block's time. The block keeps its weights
[in, out] (out contiguous): for the tensor cores' 4-byte product B must be K-major, so with
``GEMM_KMAJOR`` each weight is copied transposed once and kept while it lives unchanged (``_w``); without
it the kernel reads them as they are and Triton stages them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton import common
from kernels.matmul.triton_epilogue import gemm_epilogue, hopper_epilogue
from kernels.trimul_block._fused_weights import _cached
from mage.errors import MageInputError

# 'hopper': the fused road on matmul's Hopper GEMM, its own tiles (refused elsewhere); 'hopper_gated': the same
# with the gates and the mask in the first GEMM's epilogue (``_gated_in``) where H allows (else as 'hopper'), and
# on a card without TMA and warpgroup MMA the 'fused' road with the config's GEMM tiles, so a rule may name it
ROADS = ("cublas", "fused", "hopper", "hopper_gated")


def road(c: dict, t=None) -> str:
    """The road the projections take for config ``c`` with tensors on ``t``'s device (None: the current one)."""
    if c["GEMM"] != "hopper_gated":
        return c["GEMM"]
    from kernels.matmul import triton_hopper as hop  # (a light import: its kernels compile on first use)
    return "hopper_gated" if hop.available(None if t is None else t.device) else "fused"


def gemm_keys(road, bm=128, bn=64, bk=32, warps=4, stages=4, kmajor=1, gated="", out="") -> dict:
    """A config's projection keys: the road and the fused GEMMs' tiles (read only on that road), and by name from
    matmul's Hopper table ('': that road's own choice for the sizes) the gated GEMM's tiles on the 'hopper_gated'
    road, ``GATED_TILES``, and the output GEMM's on both Hopper roads, ``OUT_TILES``."""
    return dict(GEMM=road, GEMM_M=bm, GEMM_N=bn, GEMM_K=bk, GEMM_WARPS=warps, GEMM_STAGES=stages,
                GEMM_KMAJOR=kmajor, GATED_TILES=gated, OUT_TILES=out)


def hopper_tiles(c: dict, key: str, dtype: torch.dtype, op: str = "trimul_block") -> dict:
    """The config of matmul's Hopper table that ``c[key]`` names, as overrides (none for ''); an unknown name is
    refused, naming ``op``. ``dtype``: the operands', which pick the table (fp32x3 for FP32, as the road runs it)."""
    if not c[key]:
        return {}
    from kernels.matmul import triton_hopper as hop
    precision = "fp32x3" if dtype == torch.float32 else "bf16"
    if c[key] not in hop.TILES[precision].configs:
        raise MageInputError(op, "config", f"{key} must name a config of matmul's Hopper {precision} table, "
                                           f"got {c[key]!r}")
    return dict(hop.TILES[precision][c[key]])


def launches(consts: dict) -> int:
    """The projections' launches: two GEMMs and the gate, or two fused GEMMs (the K-major copies of the
    weights, ``GEMM_KMAJOR``, are made once while the weights live: see ``_w``)."""
    return 3 if consts["GEMM"] == "cublas" else 2


def _tiles(c: dict) -> dict:
    return dict(BLOCK_M=c["GEMM_M"], BLOCK_N=c["GEMM_N"], BLOCK_K=c["GEMM_K"], num_warps=c["GEMM_WARPS"],
                num_stages=c["GEMM_STAGES"])


def _w(w: torch.Tensor, c: dict) -> torch.Tensor:
    """w [K, N] as the epilogue GEMM's W [N, K]: a transposed view, or with GEMM_KMAJOR a K-major copy,
    kept while w lives unchanged (two small launches a call otherwise, 2 of the FP32 road's 9; the rules of
    what is kept, and when not, are the fused road's: ``_fused_weights``)."""
    if not c["GEMM_KMAJOR"]:
        return w.t()
    return _cached(("k-major", id(w), w.dtype, w.device), (w,), lambda: _k_major(w))


def _k_major(w: torch.Tensor) -> torch.Tensor:
    return w.t().contiguous()


def project_in(zn, w_in, b_in, c: dict, sdt) -> torch.Tensor:
    """p = zn w_in + b_in, [R, 4H + C], stored in ``sdt``."""
    if c["GEMM"] == "cublas":
        return torch.addmm(b_in, zn, w_in)
    if road(c, zn) in ("hopper", "hopper_gated"):
        return hopper_epilogue(zn, _w(w_in, c), b_in, torch.empty((zn.shape[0], w_in.shape[1]), dtype=sdt,
                                                                  device=zn.device))
    return gemm_epilogue(zn, _w(w_in, c), b_in, torch.empty((zn.shape[0], w_in.shape[1]), dtype=sdt,
                                                            device=zn.device), **_tiles(c))


def project_out(on, w_out, b_out, g, y, c: dict, offs_64: bool) -> torch.Tensor:
    """y = (on w_out + b_out) * sigmoid(g), written into ``y`` [R, C]; g [R, C] (p's last C columns)."""
    R, C = y.shape
    if road(c, on) == "fused":
        return gemm_epilogue(on, _w(w_out, c), b_out, y, gate=g, **_tiles(c))
    if c["GEMM"] in ("hopper", "hopper_gated"):
        return hopper_epilogue(on, _w(w_out, c), b_out, y, gate=g, tiles=hopper_tiles(c, "OUT_TILES", on.dtype))
    if y.dtype != on.dtype:  # (under the interpreter: y an FP32 buffer for bf16 values)
        y.copy_(torch.addmm(b_out, on, w_out))
    else:
        torch.addmm(b_out, on, w_out, out=y)
    grid = (common.cdiv(R, c["OUT_R"]), common.cdiv(C, c["OUT_C"]))
    _out_gate_kernel[grid](g, y, R, C, g.stride(0), 0, BLOCK_R=c["OUT_R"], BLOCK_C=c["OUT_C"],
                           OFFS_64=offs_64, num_warps=c["OUT_WARPS"])
    return y


# <kernel>
@triton.jit
def _out_gate_kernel(
    P, Y,  # p [R, 4H + C]; y [R, C], contiguous, gated in place
    R, C, stride_p, g0,  # g0: the output gate's first column of p (4H)
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, OFFS_64: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    if OFFS_64:
        rows = rows.to(tl.int64)
    mask = (rows < R)[:, None] & (cols < C)[None, :]
    g = tl.load(P + rows[:, None] * stride_p + g0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    y_ptrs = Y + rows[:, None] * C + cols[None, :]
    y = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)  # (as in the gate kernel)
    tl.store(y_ptrs, tl.sigmoid(g) * y, mask=mask)
# </kernel>
