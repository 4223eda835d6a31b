"""The message-passing layer assembled from the project's Triton kernels, with cuBLAS for the GEMMs:

    m = neighbor_agg(graph, h)           Triton: one launch, CSR rows, FP32 sums in a fixed order
    a = layernorm(m, gamma, beta)        Triton: one launch, a row of F = 128 in registers
    z = a W1^T                           cuBLAS (torch.mm)
    g = bias_gelu(z, b1)                 Triton: one launch, the bias and the exact GELU fused
    y = g W2^T + b2                      cuBLAS (torch.addmm: the bias vector rides in its epilogue)
    y += h                               the residual, one elementwise launch

Six launches a call (``LAUNCHES``). The GEMMs stay with cuBLAS, the library a block author would keep
(the project's Triton matmul has no epilogue to offer them); the block's own kernels take everything
between them. The residual costs one more pass over [n, F] (read y and h, write y): no single cuBLAS
call adds both a matrix and a bias vector, and a GEMM with that epilogue in Triton is the next step.
Precisions: fp32 and bf16, one launcher, six launches at both. At bf16, h, m, LN(m), the hidden
activations and the output are stored in bf16 and every kernel computes in FP32: the aggregation sums
w_ij h_j in FP32 (the graph's weights stay FP32) and rounds m once, the LayerNorm's statistics, bias +
GELU, and cuBLAS's bf16 GEMMs accumulate in FP32; the residual add rounds once more.
"""
from __future__ import annotations

import torch

from kernels._pytorch import set_precision
from kernels._triton import COLOR, LABEL, ORDER, common
from kernels.bias_gelu.triton_kernel import bias_gelu
from kernels.layernorm.triton_kernel import layernorm
from kernels.neighbor_agg import triton_kernel as agg
from kernels.neighbor_agg.graph import CSRGraph
from mage import ops
from mage.errors import MageInputError
from mage.registry import register

from .spec import OP, SPEC, check_layers

LAUNCHES = 6  # aggregation, LayerNorm, GEMM, bias + GELU, GEMM with bias, residual

# The LayerNorm's tiles for rows of F = 128 (a prediction, not yet swept): the operation's own
# defaults give a program one row of 1024 or more columns; a row of 128 is one value a thread at 4
# warps, so a program takes 8 rows. No eviction hints: the GEMM reads LN's output next, from L2 at
# the field size.
LN_CONFIG = dict(BLOCK_R=8, MAX_BLOCK_C=1024, num_warps=4, EVICT=0)


def _forward(rowptr, col, w, max_degree, h, gamma, beta, W1, b1, W2, b2, out):
    """The block on validated inputs (h fp32 or bf16, at least one node)."""
    n, F = h.shape
    set_precision("fp32")  # IEEE FP32 GEMMs: a TF32 setting left by another caller must not leak in (bf16: unread)
    m = agg._launch(rowptr, col, w, h, torch.empty((n, F), dtype=h.dtype, device=h.device), max_degree, {})
    a = layernorm(m, gamma, beta, **LN_CONFIG)
    g = bias_gelu(torch.mm(a, W1.t()), b1)
    torch.addmm(b2, g, W2.t(), out=out)
    return out.add_(h)


def mp_block(graph, h, gamma, beta, W1, b1, W2, b2, out=None):
    """h + W2 gelu(W1 LN(m) + b1) + b2, m_i = sum over j in N(i) of w_ij h_j (see ``spec``)."""
    SPEC.validate(graph, h, gamma, beta, W1, b1, W2, b2)
    inputs = (graph, h, gamma, beta, W1, b1, W2, b2)
    SPEC.validate_out(inputs, out)
    common.on_device(OP, dict(graph=graph.col, h=h, gamma=gamma, beta=beta, W1=W1, b1=b1, W2=W2, b2=b2))
    out = SPEC.empty_out(*inputs) if out is None else out
    if graph.n == 0:
        return out
    return _forward(graph.rowptr, graph.col, graph.w, graph.max_degree, h, gamma, beta, W1, b1, W2, b2, out)


def prepare(graph, h, *layer):
    """The aggregation's split plan, built once per input set (never timed), as its own column does."""
    agg.prepare(graph, h)
    return (graph, h) + layer


for _dtype in ("fp32", "bf16"):  # one launcher: h's dtype picks the precision
    register(OP, "triton", dtype=_dtype, family="triton", order=ORDER, label=LABEL, color=COLOR, interpret=True,
             needs_cuda=True, prepare=prepare,
             config={"aggregation": "neighbor_agg (Triton)", "layernorm": "Triton " + str(LN_CONFIG),
                     "gemm": "cuBLAS (torch.mm)", "bias_gelu": "Triton",
                     "gemm2": "cuBLAS (torch.addmm, bias in the epilogue)", "residual": "torch add_",
                     "launches": LAUNCHES})(mp_block)


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
    """Launches one call makes (the harness's launches-per-call test reads it)."""
    return LAUNCHES
