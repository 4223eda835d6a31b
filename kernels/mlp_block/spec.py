"""The Transformer MLP block, pre-LayerNorm: y = x + W2 gelu(W1 LN(x) + b1) + b2 (exact GELU), a model
block built from three of the operations (LayerNorm, matmul, bias + GELU) and measured as one workload.

Weight layout: each W is held as a ``Linear`` layer holds it, [out features, in features]:
W1 [hidden, d] and W2 [d, hidden]. The GEMM h @ W1^T then reads its B operand (W1^T, [d, hidden]) with
the reduction dimension contiguous, K-major, which is the layout Hopper's tensor-core instruction reads
a 4-byte (TF32) operand in directly (kernels/NOTES.md, "B's layout on the tensor cores"); an N-major B
costs either 4-byte staging copies or a transposing copy per call. cuBLAS takes either layout through
its transpose flag, so the library columns lose nothing by it, and a model's checkpoint arrives this way.
"""
from __future__ import annotations

import math

import torch

from kernels.layernorm.spec import EPS
from mage.errors import MageInputError
from mage.ops import FLOAT, Batching, Op, Part, dim, randn, same_device, tensor, torch_dtype

NAME = "mlp_block"
ARGS = ("x", "gamma", "beta", "W1", "b1", "W2", "b2")


def make_inputs(s, gen, device, dtype, dist):
    """x [T, d] (with an offset LayerNorm must remove); the weights scaled as a real init is (1/sqrt of
    the fan-in) so every activation stays O(1); 'heavy' makes x and both weight matrices heavy-tailed."""
    dt = torch_dtype(NAME, dtype)
    T, d, H = s["T"], s["d"], s["hidden"]
    x = randn((T, d), gen, device, dist) + 0.5
    gamma = 1.0 + 0.1 * randn((d,), gen, device, "normal")
    beta = 0.1 * randn((d,), gen, device, "normal")
    W1 = randn((H, d), gen, device, dist, scale=1.0 / math.sqrt(max(d, 1)))
    b1 = 0.1 * randn((H,), gen, device, "normal")
    W2 = randn((d, H), gen, device, dist, scale=1.0 / math.sqrt(max(H, 1)))
    b2 = 0.1 * randn((d,), gen, device, "normal")
    return tuple(t.to(dt) for t in (x, gamma, beta, W1, b1, W2, b2))


def reference(x, gamma, beta, W1, b1, W2, b2):
    """The whole block in float64 (for bf16 rows: of the bf16 values themselves, so only the
    implementation's own rounding is measured). LayerNorm with the biased variance and the same eps as
    the LayerNorm operation."""
    x, gamma, beta, W1, b1, W2, b2 = (t.double() for t in (x, gamma, beta, W1, b1, W2, b2))
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    h = (x - mean) / torch.sqrt(var + EPS) * gamma + beta
    z = h @ W1.T + b1
    g = 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))
    return x + g @ W2.T + b2


def validate(x, gamma, beta, W1, b1, W2, b2):
    named = dict(zip(ARGS, (x, gamma, beta, W1, b1, W2, b2)))
    for name, t in named.items():
        tensor(NAME, name, t, FLOAT, 2 if name in ("x", "W1", "W2") else 1)
    for name, t in named.items():  # one precision for the whole block: a stray fp32 weight is a bug
        if t.dtype != x.dtype:
            raise MageInputError(NAME, name, f"has dtype {str(t.dtype).replace('torch.', '')}, but x has "
                                             f"{str(x.dtype).replace('torch.', '')}")
    same_device(NAME, named)
    d, H = x.shape[1], W1.shape[0]
    if d == 0:
        raise MageInputError(NAME, "x", "must have at least one column (d) for LayerNorm to normalise over")
    dim(NAME, "gamma", gamma, 0, d, "d, the columns of x")
    dim(NAME, "beta", beta, 0, d, "d, the columns of x")
    dim(NAME, "W1", W1, 1, d, "d, the columns of x: W1 is [hidden, d]")
    dim(NAME, "b1", b1, 0, H, "hidden, the rows of W1")
    dim(NAME, "W2", W2, 0, d, "d, the columns of x: W2 is [d, hidden]")
    dim(NAME, "W2", W2, 1, H, "hidden, the rows of W1: W2 is [d, hidden]")
    dim(NAME, "b2", b2, 0, d, "d, the columns of x")


def flops(s):
    """The two GEMMs (2 T d hidden each), plus LayerNorm (8 T d, as the LayerNorm spec counts it),
    bias + GELU (6 T hidden) and the second bias and the residual (2 T d)."""
    T, d, H = s["T"], s["d"], s["hidden"]
    return 4 * T * d * H + 6 * T * H + 10 * T * d


def compulsory_bytes(s, isz=4):
    """Every weight, x and y once each: what any implementation must move. The intermediates [T, hidden]
    need not reach memory at all in a fully fused block, so they are not compulsory."""
    T, d, H = s["T"], s["d"], s["hidden"]
    return isz * (2 * d * H + H + 3 * d + 2 * T * d)


def random_shape(rnd):
    return dict(T=rnd.randint(1, 3000), d=rnd.randint(1, 1500), hidden=rnd.randint(1, 5000))


# Kernel names of each operation, in every column (the other blocks use them too). A kernel goes to the
# first part that finds it, so GELU's kernels are claimed before the elementwise catch-all sees them.
# Library GEMMs: cuBLAS's and cuBLASLt's kernels (sm90_xmma_gemm_..., ampere_sgemm_..., nvjet_...,
# cutlass_..., gemv2T_kernel..., gemmk1_kernel, splitKreduce_kernel) and the project's fused GEMM.
GEMM = (r"gemm", r"gemv", r"xmma", r"nvjet", r"cutlass", r"splitkreduce", r"cublas")
# PyTorch's vectorized_layer_norm_kernel (or RowwiseMoments + LayerNormForward), the project's
# _layernorm_kernel, torch.compile's triton_per_fused_native_layer_norm_...
LAYERNORM = (r"layer_?norm", r"rowwisemoments")
GELU = (r"gelu",)  # PyTorch's GeluCUDAKernelImpl, the project's _bias_gelu_kernel, triton_poi_fused_..._gelu_...
# what is left: PyTorch's elementwise kernels (bias, residual), torch.compile's pointwise kernels
ELEMENTWISE = (r"elementwise", r"functor", r"triton_poi", r"triton_per", r"triton_red")


# The operations the block calls, with their shapes at the block's shape: the custom column runs
# LayerNorm and bias + GELU as the project's Triton kernels; its GEMMs are its default road's: at FP32
# the project's tf32x3 GEMM (the matmul's 'triton' column at 'fp32x3' is that operation alone), at bf16
# cuBLAS's (the speedup one by construction).
def _gemm_tiles(dtype):
    """The GEMM tiles the custom block's default road passes at ``dtype`` (None on the cuBLAS road)."""
    from kernels.matmul.triton_epilogue import as_matmul_config
    from .triton_block import default_config  # here, not at the top: the launcher imports this spec
    c = default_config(dtype)
    return as_matmul_config(c) if c["GEMM"] == "fused" else None


PARTS = (Part("layernorm", LAYERNORM, lambda s: [dict(R=s["T"], C=s["d"])]),
         Part("bias_gelu", GELU, lambda s: [dict(R=s["T"], C=s["hidden"])]),
         Part("matmul", GEMM, lambda s: [dict(M=s["T"], K=s["d"], N=s["hidden"]),
                                         dict(M=s["T"], K=s["hidden"], N=s["d"])],
              custom={"fp32": "triton@fp32x3", "bf16": "pytorch"}, tiles=lambda dt: _gemm_tiles(dt)),
         Part("elementwise", ELEMENTWISE))  # the residual and the second bias: no operation of their own


GPT2 = dict(d=768, hidden=3072)  # GPT-2 small
SPEC = Op(
    name=NAME, label="Transformer MLP block", short="MLP block", order=100, marker="star", work="flops",
    kind="block", args=ARGS,
    equation=r"y = x + W_2\,\mathrm{gelu}\!\left(W_1\,\mathrm{LN}(x) + b_1\right) + b_2",
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda x, *w: (tuple(x.shape), x.dtype),
    flops=flops, bytes=compulsory_bytes,
    shapes={"field": [dict(T=2048, **GPT2)], "large": [dict(T=4096, d=4096, hidden=16384)],
            # throughput against batch: tokens from one (a decoding step) to a long prefill
            "sweep": [dict(T=t, **GPT2) for t in (1, 16, 128, 1024, 4096, 16384)]},
    # sizes that are multiples of nothing, one token, no tokens; the first five are small enough for
    # the malformed-call test under the interpreter
    awkward=[dict(T=1, d=1, hidden=1), dict(T=1, d=5, hidden=3), dict(T=3, d=37, hidden=19),
             dict(T=17, d=33, hidden=131), dict(T=0, d=8, hidden=12), dict(T=67, d=130, hidden=257)],
    random_shape=random_shape,
    dtypes=("fp32", "bf16"),
    # fp32: the operations' FP32 tolerance, which a TF32 slip in either GEMM (about 3e-4) fails; the
    # composition's own FP32 error is far below it (about 1e-6 after two GEMMs of K = 3072).
    # bf16: the activations are rounded to bf16 between the steps (LN output, pre-activation, GELU
    # output, each GEMM's output, the residual sum), a few 2^-9 relative errors that add: a few 1e-3
    # in norm, so 2e-2 leaves room for that and still fails a wrong index or a dropped term.
    tolerance={"fp32": 5e-5, "bf16": 2e-2},
    # served as requests of one 128-token sequence each; LayerNorm's and both layers' weights are shared
    batch=Batching(size="T", axes={"x": 0}, items=128),
    parts=PARTS,
)
