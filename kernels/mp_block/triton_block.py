"""The message-passing layer assembled from the project's Triton kernels:

    m = neighbor_agg(graph, h)           Triton: one launch, CSR rows, FP32 sums in a fixed order
    a = layernorm(m, gamma, beta)        Triton: one launch, a row of F = 128 in registers
    then one of two roads for the MLP, chosen by the config key ``GEMM`` (the block's tile sweep
    measures both):

'cublas', six launches a call:
    z = a W1^T                           cuBLAS (torch.mm)
    g = bias_gelu(z, b1)                 Triton: one launch, the bias and the exact GELU fused
    y = g W2^T + b2                      cuBLAS (torch.addmm: the bias vector rides in its epilogue)
    y += h                               the residual, one elementwise launch (no cuBLAS call adds both
                                         a matrix and a bias vector)

'fused', four launches a call: both projections as the project's GEMM with its epilogue
(``kernels.matmul.triton_epilogue``): g = gelu(a W1^T + b1) in one launch (z is never written), then
y = g W2^T + b2 + h in one more. At FP32 the products are tf32x3 (FP32 accuracy on the tensor cores),
which is what can make them faster than cuBLAS's SGEMM, besides the two launches and the two passes
over [n, H] and [n, F] the fusion saves.

Precisions: fp32 and bf16, one launcher, the same launches at both. At bf16, h, m, LN(m), the hidden
activations and the output are stored in bf16 and every kernel computes in FP32: the aggregation sums
w_ij h_j in FP32 (the graph's weights stay FP32) and rounds m once, the LayerNorm's statistics, bias +
GELU, and each GEMM accumulate in FP32; the cuBLAS road's residual add rounds once more.
"""
from __future__ import annotations

import torch

from kernels._pytorch import set_precision
from kernels._triton import TileTable, common, register_kernel
from kernels.bias_gelu.triton_kernel import bias_gelu
from kernels.layernorm.triton_kernel import layernorm
from kernels.matmul.triton_epilogue import gemm_epilogue, hopper_epilogue
from kernels.neighbor_agg import triton_kernel as agg
from kernels.neighbor_agg.graph import CSRGraph
from mage import ops
from mage.errors import MageInputError

from .spec import OP, SPEC, check_layers

# The LayerNorm's tiles in this block, for rows of F = 128 (a prediction, not swept): the operation's
# own defaults give a program one row of 1024 or more columns; a row of 128 is one value a thread at 4
# warps, so a program takes 8 rows. No eviction hints: the GEMM reads LN's output next, from L2 at the
# field size. The block's parts (facets.py) pass them on, so the Amdahl attribution times the operation
# alone with them too.
LN_TILES = dict(BLOCK_R=8, MAX_BLOCK_C=1024, num_warps=4, EVICT=0)

# per call: aggregation, LayerNorm, GEMM, bias + GELU, GEMM with bias, residual; or aggregation,
# LayerNorm and the two fused GEMMs
LAUNCHES = {"cublas": 6, "fused": 4, "hopper": 4}  # 'hopper': the fused road on matmul's Hopper GEMM


def _road(gemm, bm=128, bn=64, bk=32, warps=4, stages=4, group=8):
    """A config: the road, and the fused GEMMs' tiles (read only on the fused road)."""
    return dict(GEMM=gemm, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps, num_stages=stages)


# Names: the road, and the fused GEMMs' tiles (warps w, stages s). The cuBLAS road first (the measured
# baseline), then fused tiles: at F = H = 128 each projection's K is 128, four steps of 32 (FP32) or two
# of 64 (bf16), so a tile's prologue is most of its loop and narrow tiles (more programs over 16384
# rows) are tried beside the MLP's 128 x 128. The block's tile sweep (run 20261204T205225Z, its field
# shape, kernel time): the fused road at 53.7 us against 82.2 on the cuBLAS road at fp32 (the other
# fused tiles 54-60), 70.9 against 83.3 at bf16 (all fused tiles within 0.6%; that run's aggregation
# still had the FP32 tiles, 54 us of the 71): the base everywhere, no rule.
TILES = {
    "fp32": TileTable(OP, {
        "cublas": _road("cublas"),
        "fused_m128_n64_k32_w4_s4": _road("fused"),
        "fused_m64_n128_k32_w4_s4": _road("fused", 64, 128),
        "fused_m128_n128_k32_w8_s3": _road("fused", 128, 128, 32, 8, 3),
        "fused_m64_n64_k32_w4_s4": _road("fused", 64, 64, 32, 4, 4),
        "hopper": {"GEMM": "hopper"},  # the Hopper road's own tiles
    }, base="fused_m128_n64_k32_w4_s4"),
    "bf16": TileTable(OP, {
        "cublas": _road("cublas"),
        "fused_m128_n64_k64_w4_s4": _road("fused", 128, 64, 64),
        "fused_m128_n128_k64_w8_s3": _road("fused", 128, 128, 64, 8, 3),
        "fused_m64_n128_k64_w4_s4": _road("fused", 64, 128, 64),
        "fused_m64_n64_k64_w4_s3": _road("fused", 64, 64, 64, 4, 3),
        "hopper": {"GEMM": "hopper"},
    }, base="fused_m128_n128_k64_w8_s3"),
}


def _forward(rowptr, col, w, max_degree, h, gamma, beta, W1, b1, W2, b2, out, config=None):
    """The block on validated inputs (h fp32 or bf16, at least one node)."""
    n, F = h.shape
    cfg = TILES["fp32" if h.dtype == torch.float32 else "bf16"].choose(dict(n=n, F=F, H=W1.shape[0]), config)
    if cfg["GEMM"] not in LAUNCHES:  # refused before any launch, not run on the other road
        raise MageInputError(OP, "config", f"GEMM must be one of {sorted(LAUNCHES)}, got {cfg['GEMM']!r}")
    m = agg._launch(rowptr, col, w, h, torch.empty((n, F), dtype=h.dtype, device=h.device), max_degree, {})
    a = layernorm(m, gamma, beta, **LN_TILES)  # rows of F = 128, several a program (why: LN_TILES)
    road = cfg.pop("GEMM")
    if road == "hopper":
        g = hopper_epilogue(a, W1, b1, torch.empty((n, W1.shape[0]), dtype=h.dtype, device=h.device), gelu=True)
        return hopper_epilogue(g, W2, b2, out, residual=h)
    if road == "fused":
        g = gemm_epilogue(a, W1, b1, torch.empty((n, W1.shape[0]), dtype=h.dtype, device=h.device), gelu=True, **cfg)
        return gemm_epilogue(g, W2, b2, out, residual=h, **cfg)
    set_precision("fp32")  # IEEE FP32 GEMMs: a TF32 setting left by another caller must not leak in (bf16: unread)
    g = bias_gelu(torch.mm(a, W1.t()), b1)
    torch.addmm(b2, g, W2.t(), out=out)
    return out.add_(h)


def mp_block(graph, h, gamma, beta, W1, b1, W2, b2, out=None, **config):
    """h + W2 gelu(W1 LN(m) + b1) + b2, m_i = sum over j in N(i) of w_ij h_j (see ``spec``); ``config``
    picks the road and its tiles (``TILES``)."""
    SPEC.validate(graph, h, gamma, beta, W1, b1, W2, b2)
    inputs = (graph, h, gamma, beta, W1, b1, W2, b2)
    SPEC.validate_out(inputs, out)
    common.on_device(OP, dict(graph=graph.col, h=h, gamma=gamma, beta=beta, W1=W1, b1=b1, W2=W2, b2=b2))
    out = SPEC.empty_out(*inputs) if out is None else out
    if graph.n == 0:
        return out
    return _forward(graph.rowptr, graph.col, graph.w, graph.max_degree, h, gamma, beta, W1, b1, W2, b2, out,
                    config)


def prepare(graph, h, *layer, **config):
    """The aggregation's split plan, built once per input set (never timed), as its own column does."""
    agg.prepare(graph, h)
    return (graph, h) + layer


for _dtype, _tiles in TILES.items():
    register_kernel(OP, mp_block, _tiles, precision=_dtype, prepare=prepare)


# ------------------------------------------------------------------------- as a PyTorch operator
# Raw CSR tensors carry no proof of a valid graph: the operator checks the cheap facts on every call
# and the structure once per tensor set (as neighbor_agg's operator does), remembering only the
# largest degree, so the memo keeps no tensor alive.
_VALIDATED = common.TensorMemo(64)


def _cheap_checks(rowptr, col, w, h, *layer) -> int:
    """Types, ranks, sizes and one device, reading no device memory; returns n."""
    for name, t, dt in (("rowptr", rowptr, torch.int32), ("col", col, torch.int32), ("w", w, torch.float32)):
        ops.tensor(OP, name, t, (dt,), 1)
    ops.same_device(OP, {"rowptr": rowptr, "col": col, "w": w})
    if rowptr.numel() < 1:
        raise MageInputError(OP, "rowptr", "must have n + 1 >= 1 entries")
    n = rowptr.numel() - 1
    check_layers(n, col.device, h, *layer)
    return n


@torch.library.custom_op("mage::triton_mp_block", mutates_args=())
def mp_block_op(rowptr: torch.Tensor, col: torch.Tensor, w: torch.Tensor, h: torch.Tensor, gamma: torch.Tensor,
                beta: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor, W2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """The Triton block as a PyTorch operator on raw CSR tensors (a graph on the nodes of h)."""
    layer = (gamma, beta, W1, b1, W2, b2)
    n = _cheap_checks(rowptr, col, w, h, *layer)
    common.on_device(OP, dict(rowptr=rowptr, col=col, w=w, h=h, gamma=gamma, beta=beta, W1=W1, b1=b1, W2=W2,
                              b2=b2))
    max_degree = _VALIDATED.get((rowptr, col, w), n)
    if max_degree is None:
        max_degree = _VALIDATED.put((rowptr, col, w), n, CSRGraph.build(rowptr, col, w, n, op=OP).max_degree)
    out = torch.empty((n, h.shape[1]), dtype=h.dtype, device=h.device)
    if n == 0:
        return out
    return _forward(rowptr, col, w, max_degree, h, *layer, out)


@mp_block_op.register_fake
def _(rowptr, col, w, h, gamma, beta, W1, b1, W2, b2):
    n = _cheap_checks(rowptr, col, w, h, gamma, beta, W1, b1, W2, b2)  # a call with any 'meta' input
    return h.new_empty((n, h.shape[1]))


def launches(config: dict) -> int:
    """Launches one call makes with ``config`` (the harness's launches-per-call test reads it)."""
    return LAUNCHES[config.get("GEMM", TILES["fp32"].base_config()["GEMM"])]
