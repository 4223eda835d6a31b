"""The MLP block run from Rust: y = x + W2 gelu(W1 LN(x) + b1) + b2 as one call into the Rust library
(kernels/_rust/host/src/blocks.rs), which launches the project's Rust LayerNorm and bias + GELU kernels
and cuBLAS SGEMMs (loaded by the library at run time, IEEE FP32) in order on the caller's stream:

    LN(x) -> z = LN W1^T -> g = gelu(z + b1) -> y = x (a copy) -> y += ones b2^T -> y += g W2^T

Five kernels a call (``LAUNCHES``; the copy and the ones' memset are copies). 'rust_native' runs the
same function from the Rust binary, with no Python in the loop.

Precisions: fp32, and bf16 (the inputs' dtype picks; the library's block 'mlp_block.bf16'): x, the
weights, LN(x), z, g and y stored in bf16, every kernel computing in FP32 (the ops' bf16 kernel
entries: the FP32 kernels' bodies on u16 storage), the GEMMs cublasGemmEx on bf16 operands with FP32
accumulation; y = x + b2 is rounded to bf16 once before the last GEMM adds into it, as the Triton bf16
block's cuBLAS road does. The same five launches."""
from __future__ import annotations

import torch

from kernels import _rust
from kernels._rust.register import block_info, block_name, block_run, dtype_of, register_block
from kernels.layernorm.spec import EPS
from mage import ops

from .spec import ARGS, NAME, SPEC

LAUNCHES = 5  # LayerNorm, SGEMM, bias + GELU, the bias as a depth-1 SGEMM, SGEMM (the library's count)


def _prologue(inputs, out):
    """(output, device) after the block's validation, naming the argument at fault."""
    SPEC.validate(*inputs)
    x = inputs[0]
    ops.check_out(NAME, out, tuple(x.shape), x.dtype, x.device)
    y = torch.empty_like(x) if out is None else out
    # bf16 inputs run the bf16 kernels; the spec has checked that every tensor shares x's dtype
    storage = torch.bfloat16 if x.dtype == torch.bfloat16 else torch.float32
    return y, _rust.on_cuda(NAME, {**dict(zip(ARGS, inputs)), "out": y}, storage=storage)


def values(x, gamma, beta, W1, b1, W2, b2, y, scratch):
    """The block's packed arguments, in blocks.rs's MLP_PARAMS order."""
    T, d = x.shape
    return (x, gamma, beta, W1, b1, W2, b2, y, scratch, T, d, W1.shape[0], scratch.numel(), EPS)


def _scratch(x, W1):
    """The library's scratch, in floats at both precisions (bf16 parts use half of theirs)."""
    T, d = x.shape
    return torch.empty(block_info(NAME, T, d, W1.shape[0])[0], dtype=torch.float32, device=x.device)


def mlp_block(x, gamma, beta, W1, b1, W2, b2, out=None):
    """The block from Rust through the C ABI (see the module docstring); x's dtype picks the precision."""
    inputs = (x, gamma, beta, W1, b1, W2, b2)
    y, dev = _prologue(inputs, out)
    if x.shape[0]:
        block_run(block_name(NAME, dtype_of(x)), dev, values(*inputs, y, _scratch(x, W1)))
    return y


def native_values(x, gamma, beta, W1, b1, W2, b2):
    """What rust_native is given: the packed values, the output and scratch travelling as sizes."""
    SPEC.validate(x, gamma, beta, W1, b1, W2, b2)
    vals = values(x, gamma, beta, W1, b1, W2, b2, torch.empty_like(x), _scratch(x, W1))
    return vals, {7, 8}


def launches(config: dict) -> int:
    """Kernels one call launches with at least one token (the GPU test counts them)."""
    return LAUNCHES


GEMM = {"fp32": "cuBLAS SGEMM (loaded from Rust)",
        "bf16": "cuBLAS GemmEx bf16, FP32 accumulation (loaded from Rust)"}
for _dtype in ("fp32", "bf16"):  # one function: the inputs' dtype picks the library's block
    register_block(NAME, mlp_block, native_values, dtype=_dtype,
                   config=dict(layernorm="Rust", gemm=GEMM[_dtype], bias_gelu="Rust",
                               bias2_residual="copy + depth-1 GEMM", launches=LAUNCHES))
