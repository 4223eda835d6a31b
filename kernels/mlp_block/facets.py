"""The MLP block's facets (``mage.facets``): how the book names and draws it, how its requests batch
when served, and the operations it calls with the kernel names of each (the Amdahl attribution). Its
mathematics is ``spec.py``. The kernel-name patterns are shared with the other blocks' facets."""
from mage import facets
from mage.ext.amdahl.parts import Part
from mage.ext.service.batching import Batching

from .spec import NAME

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
    # imported when asked, not at the top: the launchers register implementations, which discovery
    # allows only once every spec and facet is in, and reading a label should not import Triton
    from kernels.matmul.triton_epilogue import as_matmul_config

    from .triton_block import default_config
    c = default_config(dtype)
    return as_matmul_config(c) if c["GEMM"] == "fused" else None


PARTS = (Part("layernorm", LAYERNORM, lambda s: [dict(R=s["T"], C=s["d"])]),
         Part("bias_gelu", GELU, lambda s: [dict(R=s["T"], C=s["hidden"])]),
         Part("matmul", GEMM, lambda s: [dict(M=s["T"], K=s["d"], N=s["hidden"]),
                                         dict(M=s["T"], K=s["hidden"], N=s["d"])],
              custom={"fp32": "triton@fp32x3", "bf16": "pytorch"}, tiles=_gemm_tiles),
         Part("elementwise", ELEMENTWISE))  # the residual and the second bias: no operation of their own

facets.declare(
    NAME, label="Transformer MLP block", short="MLP block", order=100, marker="star", work="flops",
    # served as requests of one 128-token sequence each; LayerNorm's and both layers' weights are shared
    batch=Batching(size="T", axes={"x": 0}, items=128),
    parts=PARTS,
)
