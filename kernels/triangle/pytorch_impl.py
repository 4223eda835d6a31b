"""The PyTorch columns of the triangle contraction: one einsum (which PyTorch runs as permute copies
around a batched GEMM), at FP32 and bf16. At bf16 the GEMM multiplies bf16 operands and accumulates in
FP32 (cuBLAS on the GPU, PyTorch's own GEMM on the CPU), rounding the output to bf16 once; PyTorch's
default setting that lets cuBLAS reduce split-K partial sums in bf16 is left as a user finds it."""
import torch

from kernels._pytorch import register_expression


def expression(A, B):
    return torch.einsum("ikc,jkc->ijc", A, B)


register_expression("triangle", expression, dtypes=("fp32", "bf16"), uses_matmul=True)
