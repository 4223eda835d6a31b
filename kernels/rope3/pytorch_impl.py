"""The PyTorch columns of the rotary embedding: the rotation composed as the model composes it, each
step its own eager kernel (positions, angles, sine and cosine, the pairwise swap, the products and the
sum per axis, a concatenation), and the same expression under torch.compile.

One difference from the model's code, of precision only: the angles are formed in FP32 (the model forms
them in the activations' dtype, up to 0.03 rad off at bf16), then sine and cosine stored at x's dtype
and the products taken there, as an eager bf16 user's code would."""
import torch

from kernels._pytorch import register_expression

from .spec import THETA, positions, seg_width


def expression(x, grid):
    S = seg_width(x.shape[-1])
    half = S // 2
    pos = positions(x.shape[2], grid, x.device).float()  # [3, N]
    freq = THETA ** -(torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = pos[:, :, None] * freq  # [3, N, S/2]
    angles = torch.cat((angles, angles), -1)  # the frequencies repeat along the segment, not pairwise
    sin, cos = angles.sin().to(x.dtype), angles.cos().to(x.dtype)
    parts = []
    for s in range(3):
        seg = x[..., s * S:(s + 1) * S]
        pairs = seg.unflatten(-1, (half, 2))
        partner = torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)
        parts.append(seg * cos[s] + partner * sin[s])
    parts.append(x[..., 3 * S:])  # passed through
    return torch.cat(parts, -1)


register_expression("rope3", expression, dtypes=("fp32", "bf16"))
