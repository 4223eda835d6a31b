"""The PyTorch columns of the task's form: the module as the task's reference states it (LayerNorm, five
bias-free projections, gates, an einsum, LayerNorm, the gate, the output projection), eager and under
torch.compile."""
import torch
import torch.nn.functional as F

from kernels._pytorch import register_expression

from .spec import EPS


def expression(x, mask, norm_w, norm_b, left_proj, right_proj, left_gate, right_gate, out_gate,
               out_norm_w, out_norm_b, to_out):
    xn = F.layer_norm(x, x.shape[-1:], norm_w, norm_b, EPS)
    m = mask[..., None]
    a = F.linear(xn, left_proj) * m * torch.sigmoid(F.linear(xn, left_gate))
    b = F.linear(xn, right_proj) * m * torch.sigmoid(F.linear(xn, right_gate))
    o = torch.einsum("bikh,bjkh->bijh", a, b)
    o = F.layer_norm(o, o.shape[-1:], out_norm_w, out_norm_b, EPS) * torch.sigmoid(F.linear(xn, out_gate))
    return F.linear(o, to_out)


register_expression("trimul_gpumode", expression, dtypes=("fp32", "bf16"), uses_matmul=True)
