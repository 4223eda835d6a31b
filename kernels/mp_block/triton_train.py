"""The custom message-passing block's training path: h + W2 gelu(W1 LN(m) + b1) + b2 with
m_i = sum over j in N(i) of w_ij h_j, composed of the project's differentiable Triton operators and
cuBLAS GEMMs through torch, so that autograd runs the project's backward kernels:

1. m = ``mage::triton_neighbor_agg`` (backward: dh = A^T dy through the transposed graph, built once
   per graph and kept, every sum in a fixed order);
2. the MLP part, as the MLP block's training path runs it (``kernels/mlp_block/triton_train.py``):
   the Triton LayerNorm with saved statistics, a cuBLAS GEMM, the Triton bias + GELU, and a cuBLAS
   addmm with the residual h and b2 in its epilogue (the forward block adds the residual in a launch
   of its own after an addmm with b2: the same sums, one launch fewer here).

The graph's structure and its edge weights are not trained (they are the input, as positions are): the
aggregation is differentiable in w too, but the block's arguments hold w inside the graph object, which
the trainer leaves alone, so no edge-weight gradient is asked for.

Precisions: FP32 (IEEE FP32 GEMMs), and bf16 mixed precision as the MLP block's path follows autocast:
the GEMMs in bf16, LayerNorm and bias + GELU on bf16 storage forward and backward (the aggregation's
FP32 result rounded to bf16 as LN reads it; the kernels' sums and statistics FP32). What stays FP32: the
aggregation, forward and backward (its kernels take FP32 only; it reads h, the FP32 residual stream, and
is left as it is), the residual sum and the output, and the buffers the MLP block's path keeps FP32.
"""
from __future__ import annotations

from kernels.mlp_block.triton_train import fp32, mlp
from kernels.neighbor_agg import triton_backward as _agg_bwd  # noqa: F401 - makes the operator differentiable
from kernels.neighbor_agg.triton_operator import neighbor_agg_op
from mage.registry import declare

from .spec import OP, SPEC


def keep(graph, h, *layer):
    """The aggregation's memoised plans and transposed graph that a recorded training step reads."""
    return _agg_bwd.memo_buffers(graph, h.shape[1])


@declare("train", OP, "triton", "fp32", autocast=True, keep=keep)
def train(graph, h, gamma, beta, W1, b1, W2, b2):
    """The custom block's training path, differentiable in h and every weight."""
    SPEC.validate(graph, h, gamma, beta, W1, b1, W2, b2)
    m = neighbor_agg_op(graph.rowptr, graph.col, graph.w, fp32(h))
    return mlp(h, m, gamma, beta, W1, b1, W2, b2)
