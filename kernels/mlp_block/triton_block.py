"""The custom MLP block: y = x + W2 gelu(W1 LN(x) + b1) + b2 assembled from the project's Triton kernels.
Two roads, chosen by the config key ``GEMM`` (a tile sweep measures both):

'cublas' (the default), five launches a call:
1. LN(x): the project's Triton LayerNorm (``kernels.layernorm``), one row a program.
2. a = LN(x) W1^T: cuBLAS (``torch.mm``), IEEE FP32, reading W1 in place through its transpose flag.
3. a = gelu(a + b1), in place: the project's Triton bias + GELU (``kernels.bias_gelu``). In place so the
   block allocates one [T, hidden] buffer, not two (at the large shape 256 MB, half the block's memory).
4. y = x + b2: one elementwise launch that writes the output buffer once, so that
5. y += a W2^T is cuBLAS's own epilogue: ``addmm_`` with beta = 1 reads y as its C operand, fusing the
   second bias and the residual into the GEMM at the price of one read of y ([T, d], small next to
   the GEMM's operands).

'fused', three launches: the LayerNorm, then both projections as one Triton GEMM each
(``kernels.matmul.triton_epilogue``) with the epilogue fused: bias + GELU into the first (the pre-activation is never
written and read back: 2 x T x hidden x 4 bytes saved, and a launch), bias + residual into the second
(steps 4 and 5 become one launch). The GEMMs run tf32x3 (FP32 accuracy on the tensor cores, as the
matmul's fp32x3 row), which is what can make them faster than cuBLAS's FP32 SGEMM, not only the fusion.
The block's tile sweep (run 20261204T205225Z, field shape, kernel time) chose it at fp32 (280 us against
467 on the cuBLAS road) and the cuBLAS road at bf16 (50.6 us against 58.5 for the best fused tiles:
Triton's bf16 GEMM is slower than cuBLAS's, and the GELU the fusion saves is a small pass in bf16).

Precisions: fp32 and bf16, one launcher. At bf16 every tensor between the kernels is bf16 (x, LN(x),
the hidden activations, y) and every kernel computes in FP32: the LayerNorm's statistics, the bias and
GELU, each GEMM's accumulator (cuBLAS's bf16 GEMM accumulates in FP32; the fused road's ``tl.dot`` on
bf16 tiles is the tensor cores' bf16 product with an FP32 accumulator). The cuBLAS road's residual is
x + b2 rounded to bf16 once before the GEMM adds into it. Launches per call are the same at both.
"""
from __future__ import annotations

import functools

import torch

from kernels._triton import common
from kernels.bias_gelu.triton_kernel import bias_gelu
from kernels.layernorm.triton_kernel import layernorm
from mage import ops
from mage.errors import MageInputError
from mage.registry import Impl, register

from kernels.matmul.triton_epilogue import gemm_epilogue, hopper_epilogue
from .spec import ARGS, NAME, SPEC

LAUNCHES = {"cublas": 5, "fused": 3, "hopper": 3}  # per call with T > 0 (the GPU test counts them)


def _fused(bm, bn, bk, warps, stages, group=8):
    return dict(GEMM="fused", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps,
                num_stages=stages)


CUBLAS = {"GEMM": "cublas"}
# the fused road on matmul's Hopper GEMM (TMA, warpgroup MMA, persistent), with that road's own tiles
HOPPER = {"GEMM": "hopper"}
# Names: the road, and the fused GEMMs' tiles (warps w, stages s, GROUP_M g where it is not 8). In the
# order a tile sweep tries them: first the cuBLAS road, the baseline every fused config is measured
# against. fp32: tiles of the fp32x3 GEMM, from the matmul's fp32x3 sweep (kernels/NOTES.md: 128x128
# tiles fit in registers with 8 warps, 128x64 and 64x128 with 4; bigger ones spill). bf16: the tensor
# cores' bf16 rate is twice TF32's and six times tf32x3's, and a bf16 tile is half the bytes, so the
# tiles grow along K (64: one 128-byte line of bf16 a row); 128x256 with 8 warps is the widest
# accumulator (128 FP32 registers a thread) that leaves room for the epilogue.
TILES = {
    "fp32": {
        "cublas": CUBLAS,
        "fused_m128_n64_k32_w4_s4": _fused(128, 64, 32, 4, 4),
        "fused_m64_n128_k32_w4_s4": _fused(64, 128, 32, 4, 4),
        "fused_m128_n128_k32_w8_s4": _fused(128, 128, 32, 8, 4),
        "fused_m128_n128_k64_w8_s3_g16": _fused(128, 128, 64, 8, 3, group=16),
        "hopper": HOPPER,
    },
    "bf16": {
        "cublas": CUBLAS,
        "fused_m128_n128_k64_w8_s3": _fused(128, 128, 64, 8, 3),
        "fused_m128_n64_k64_w4_s4": _fused(128, 64, 64, 4, 4),
        "fused_m64_n128_k64_w4_s4": _fused(64, 128, 64, 4, 4),
        "fused_m128_n256_k64_w8_s3": _fused(128, 256, 64, 8, 3),
        "fused_m128_n128_k64_w8_s4_g16": _fused(128, 128, 64, 8, 4, group=16),
        "hopper": HOPPER,
    },
}
# One config at every size (no rule): the tile sweep's fastest (see the docstring). A partial config
# names a road (or keeps the default's) and takes its missing keys from that road's plain entry.
DEFAULT = {"fp32": "fused_m128_n128_k64_w8_s3_g16", "bf16": "cublas"}
ROAD_BASE = {"fp32": {"cublas": "cublas", "fused": "fused_m128_n64_k32_w4_s4", "hopper": "hopper"},
             "bf16": {"cublas": "cublas", "fused": "fused_m128_n128_k64_w8_s3", "hopper": "hopper"}}


def default_config(dtype: str) -> dict:
    """The config the block runs at ``dtype`` when none is given."""
    return dict(TILES[dtype][DEFAULT[dtype]])


def _config(config: dict, dtype: str = "fp32") -> dict:
    """The full config a call runs with: the default, or the road ``config`` names with its missing
    keys from that road's plain entry."""
    if not config:
        return default_config(dtype)
    road = config.get("GEMM", TILES[dtype][DEFAULT[dtype]]["GEMM"])
    if road not in ROAD_BASE[dtype]:
        raise MageInputError(NAME, "config", f"GEMM must be one of {sorted(ROAD_BASE[dtype])}, got {road!r}")
    base = TILES[dtype][ROAD_BASE[dtype][road]]
    unknown = set(config) - set(base)
    if unknown:
        raise MageInputError(NAME, "config", f"has unknown keys {sorted(unknown)} for GEMM={road!r}; "
                                             f"known: {sorted(base)}")
    return {**base, **config}


def mlp_block(x, gamma, beta, W1, b1, W2, b2, out=None, **config):
    """y = x + W2 gelu(W1 LN(x) + b1) + b2 with W1 [hidden, d] and W2 [d, hidden] (``Linear``'s layout)."""
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)
    cfg = _config(config, "bf16" if x.dtype == torch.bfloat16 else "fp32")
    T, d = x.shape
    ops.check_out(NAME, out, (T, d), x.dtype, x.device)
    # refused here, naming the block, before the LayerNorm launcher would refuse it naming itself
    common.on_device(NAME, dict(zip(ARGS, (x, gamma, beta, W1, b1, W2, b2))))
    h = layernorm(x, gamma, beta)
    if cfg["GEMM"] == "hopper":  # the fused road's two GEMMs on the Hopper road
        a = hopper_epilogue(h, W1, b1, torch.empty((T, W1.shape[0]), dtype=x.dtype, device=x.device), gelu=True)
        y = torch.empty((T, d), dtype=x.dtype, device=x.device) if out is None else out
        return hopper_epilogue(a, W2, b2, y, residual=x)
    if cfg["GEMM"] == "fused":
        tiles = {k: v for k, v in cfg.items() if k != "GEMM"}
        a = gemm_epilogue(h, W1, b1, torch.empty((T, W1.shape[0]), dtype=x.dtype, device=x.device), gelu=True,
                          **tiles)  # tf32x3 on FP32 operands, the bf16 tensor-core product on bf16 ones
        y = torch.empty((T, d), dtype=x.dtype, device=x.device) if out is None else out
        return gemm_epilogue(a, W2, b2, y, residual=x, **tiles)
    # IEEE FP32 GEMMs whatever a TF32 row measured before this call left the switch at (the FP32
    # tolerance fails a TF32 product); bf16 GEMMs do not read it
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.mm(h, W1.t())  # B = W1^T: K-major, read in place (no copy) through cuBLAS's transpose flag
    bias_gelu(a, b1, out=a)
    y = torch.add(x, b2, out=out) if out is not None else torch.add(x, b2)
    return y.addmm_(a, W2.t())


def _variant(dtype, **config) -> Impl:
    """An unregistered Impl at ``dtype`` running with ``config`` (the tile sweep's entries)."""
    full = _config(config, dtype)
    return Impl(op=NAME, name="triton", fn=functools.partial(mlp_block, **full), dtype=dtype, family="triton",
                needs_cuda=True, interpret=True, config=dict(full))


for _dtype in ("fp32", "bf16"):  # one launcher: the inputs' dtype picks the precision
    register(NAME, "triton", dtype=_dtype, family="triton", interpret=True, needs_cuda=True,
             config_for=lambda shape, _d=_dtype: default_config(_d),
             sweep=tuple(dict(c) for c in TILES[_dtype].values()), variant=functools.partial(_variant, _dtype))(mlp_block)


@torch.library.custom_op("mage::triton_mlp_block", mutates_args=())
def mlp_block_op(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor,
                 W2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """The block as a PyTorch operator, so torch.compile graphs can call it."""
    return mlp_block(x, gamma, beta, W1, b1, W2, b2)


@mlp_block_op.register_fake
def _(x, gamma, beta, W1, b1, W2, b2):
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)  # metadata only: a call with any 'meta' input lands here
    return torch.empty_like(x)


def launches(config: dict) -> int:
    """Launches one call makes with ``config`` (the harness's launches-per-call test reads it)."""
    return LAUNCHES[config["GEMM"]]
