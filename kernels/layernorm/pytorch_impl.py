"""The PyTorch columns of LayerNorm: ``F.layer_norm``, eager and under torch.compile, at FP32 and bf16
(bf16 storage: PyTorch takes a bf16 row's statistics in FP32 and rounds the output once)."""
import torch.nn.functional as F

from kernels._pytorch import register_expression

from .spec import EPS


def expression(x, gamma, beta):
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, EPS)


register_expression("layernorm", expression, dtypes=("fp32", "bf16"))
