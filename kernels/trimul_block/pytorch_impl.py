"""The PyTorch columns of the triangle update: the block as a PyTorch user writes it (LayerNorm, one
fused projection, the gates, an einsum, LayerNorm, the output projection and gate), eager, under
torch.compile, and under torch.compile with CUDA graphs."""
import torch
import torch.nn.functional as F

from kernels._pytorch import register_expression
from kernels.layernorm.spec import EPS


def expression(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out):
    C, H = z.shape[-1], gamma_out.shape[0]
    p = F.layer_norm(z, (C,), gamma_in, beta_in, EPS) @ w_in + b_in
    a_gate, a_val, b_gate, b_val, g = p.split((H, H, H, H, C), dim=-1)
    m = mask[..., None]
    a = torch.sigmoid(a_gate) * a_val * m
    b = torch.sigmoid(b_gate) * b_val * m
    o = torch.einsum("...ikc,...jkc->...ijc", a, b)  # z [N, N, C] or a batch [B, N, N, C]
    return torch.sigmoid(g) * (F.layer_norm(o, (H,), gamma_out, beta_out, EPS) @ w_out + b_out)


register_expression("trimul_block", expression, dtypes=("fp32", "bf16"), uses_matmul=True, graphs=True)
