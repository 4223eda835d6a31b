"""The PyTorch columns of the MLP block: the block as a PyTorch user writes it (``F.layer_norm``, two
``F.linear`` with the weights in ``Linear``'s own [out, in] layout, the exact GELU), eager, under
torch.compile, and under torch.compile with CUDA graphs."""
import torch.nn.functional as F

from kernels._pytorch import register_expression
from kernels.layernorm.spec import EPS


def expression(x, gamma, beta, W1, b1, W2, b2):
    h = F.layer_norm(x, (x.shape[-1],), gamma, beta, EPS)
    return x + F.linear(F.gelu(F.linear(h, W1, b1)), W2, b2)  # exact (erf) GELU is PyTorch's default


register_expression("mlp_block", expression, dtypes=("fp32", "bf16"), uses_matmul=True, graphs=True)
