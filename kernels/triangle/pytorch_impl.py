"""The PyTorch columns of the triangle contraction: one einsum (which PyTorch runs as permute copies
around a batched GEMM)."""
import torch

from kernels._pytorch import register_expression


def expression(A, B):
    return torch.einsum("ikc,jkc->ijc", A, B)


register_expression("triangle", expression, uses_matmul=True)
