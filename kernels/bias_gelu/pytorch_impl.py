"""The PyTorch columns of bias + GELU: eager launches two kernels (the add, then the GELU), at FP32 and
bf16 (bf16 storage: eager rounds x + b to bf16 between its two kernels; the GELU computes in FP32)."""
import torch.nn.functional as F

from kernels._pytorch import register_expression


def expression(x, b):
    return F.gelu(x + b)  # exact (erf) GELU is PyTorch's default


register_expression("bias_gelu", expression, dtypes=("fp32", "bf16"))
