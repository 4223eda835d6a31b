"""The PyTorch columns of matmul: ``A @ B`` (cuBLAS), eager and under torch.compile, at FP32, TF32, bf16."""
from kernels._pytorch import register_expression


def expression(A, B):
    return A @ B


register_expression("matmul", expression, dtypes=("fp32", "tf32", "bf16"), uses_matmul=True)
