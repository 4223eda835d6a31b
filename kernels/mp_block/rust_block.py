"""The message-passing layer run from Rust: h' = h + W2 gelu(W1 LN(m) + b1) + b2 with m the weighted
neighbour sum, as one call into the Rust library (kernels/_rust/host/src/blocks.rs), which launches the
project's Rust aggregation, LayerNorm and bias + GELU kernels and cuBLAS SGEMMs (loaded by the library
at run time, IEEE FP32) in order on the caller's stream:

    m = neighbor_agg(graph, h) -> LN(m) -> z = LN W1^T -> g = gelu(z + b1) -> y = h (a copy)
      -> y += ones b2^T -> y += g W2^T

Six kernels a call (``LAUNCHES``). The aggregation's split plan is the library's, built once per graph
and cached (kernels/_rust/plan.py). 'rust_native' runs the same function from the Rust binary.

Precisions: fp32, and bf16 (h's dtype picks; the library's block 'mp_block.bf16'): h, the layer's
weights, m, LN(m), z, g and y stored in bf16, the graph's edge weights and the aggregation's partial
sums in f32, every kernel computing in FP32 (the ops' bf16 kernel entries), the GEMMs cublasGemmEx on
bf16 operands with FP32 accumulation, y = h + b2 rounded to bf16 once before the last GEMM adds into
it (as the Triton bf16 block). The same six launches."""
from __future__ import annotations

import torch

from kernels import _rust
from kernels._rust.plan import plan_for
from kernels._rust.register import block_info, block_name, block_run, dtype_of, register_block
from mage import ops

from .spec import EPS, OP, SPEC

LAUNCHES = 6  # aggregation, LayerNorm, SGEMM, bias + GELU, the bias as a depth-1 SGEMM, SGEMM
LAYER = ("gamma", "beta", "W1", "b1", "W2", "b2")


def _prologue(inputs, out):
    """(output, device) after the block's validation, naming the argument at fault."""
    SPEC.validate(*inputs)
    SPEC.validate_out(inputs, out)
    graph, h = inputs[0], inputs[1]
    y = SPEC.empty_out(*inputs) if out is None else out
    named = {"rowptr": graph.rowptr, "col": graph.col, "w": graph.w, "h": h, **dict(zip(LAYER, inputs[2:])), "out": y}
    # bf16 features and weights run the bf16 kernels; the graph's edge weights stay float32 at both
    storage = torch.bfloat16 if h.dtype == torch.bfloat16 else torch.float32
    return y, _rust.on_cuda(OP, named, storage=storage, fp32_args=("w",))


def values(graph, h, gamma, beta, W1, b1, W2, b2, y, scratch, plan, buffers):
    """The block's packed arguments, in blocks.rs's MP_PARAMS order."""
    entries, ws, flags = buffers
    n, F = h.shape
    return (graph.rowptr, graph.col, graph.w, h, gamma, beta, W1, b1, W2, b2, y, entries, ws, flags, scratch,
            n, graph.nnz, F, W1.shape[0], plan.tasks, plan.parts, scratch.numel(), EPS)


def _scratch(h, W1):
    n, F = h.shape
    return torch.empty(block_info(OP, n, F, W1.shape[0])[0], dtype=torch.float32, device=h.device)


def mp_block(graph, h, gamma, beta, W1, b1, W2, b2, out=None):
    """The layer from Rust through the C ABI (see the module docstring)."""
    inputs = (graph, h, gamma, beta, W1, b1, W2, b2)
    y, dev = _prologue(inputs, out)
    if graph.n:
        plan = plan_for(graph)
        vals = values(*inputs, y, _scratch(h, W1), plan, plan.buffers(h.shape[1], h.device))
        block_run(block_name(OP, dtype_of(h)), dev, vals)
    return y


def prepare(graph, h, *layer):
    """The aggregation's plan and its scratch, built once per input set (never timed)."""
    if graph.col.device.type == "cuda" and graph.n:
        plan_for(graph).buffers(h.shape[1], h.device)
    return (graph, h) + layer


def native_values(graph, h, gamma, beta, W1, b1, W2, b2):
    """What rust_native is given: the packed values; the output, scratch and the plan's partial sums
    and flags travel as sizes (zeros on the device, as the kernel wants its flags)."""
    inputs = (graph, h, gamma, beta, W1, b1, W2, b2)
    SPEC.validate(*inputs)
    plan = plan_for(graph)
    vals = values(*inputs, SPEC.empty_out(*inputs), _scratch(h, W1), plan, plan.buffers(h.shape[1], h.device))
    return vals, {10, 12, 13, 14}


def launches(config: dict) -> int:
    """Kernels one call launches with at least one node (the GPU test counts them)."""
    return LAUNCHES


GEMM = {"fp32": "cuBLAS SGEMM (loaded from Rust)",
        "bf16": "cuBLAS GemmEx bf16, FP32 accumulation (loaded from Rust)"}
for _dtype in ("fp32", "bf16"):  # one function: h's dtype picks the library's block
    register_block(OP, mp_block, native_values, prepare=prepare, dtype=_dtype,
                   config=dict(aggregation="Rust neighbor_agg", layernorm="Rust", gemm=GEMM[_dtype], bias_gelu="Rust",
                               bias2_residual="copy + depth-1 GEMM", launches=LAUNCHES))
