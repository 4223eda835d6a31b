"""V-JEPA 2's rotary position embedding over three axes (frame, row, column): a model's part, lifted
from the encoder the book runs (``mage.ext.models``) so that its kernel is checked and measured like an
operation's, and shown with that model rather than among the operations.

Each head's D channels are cut into three segments of S = 2 * floor(floor(D / 3) / 2) channels (a third
each, rounded down to even: the model's rule), one segment an axis; the channels from 3S on are passed
through. Token n of a clip of frames of G x G patches sits at frame n // G^2, row (n mod G^2) // G and
column n mod G. Within segment s, channel k turns with its pair partner by the angle
pos_s(n) * 10000^(-(k mod S/2) / (S/2)): the S/2 frequencies repeat once along the segment, so channels
k and k + S/2 share one.
"""
from __future__ import annotations

import torch

from mage.errors import MageInputError
from mage.ops import FLOAT, Op, randn, tensor, torch_dtype

THETA = 10000.0  # the model's base


def seg_width(D: int) -> int:
    """S, the channels an axis: a third of D rounded down to even (V-JEPA 2's rule)."""
    return 2 * ((D // 3) // 2)


def positions(N: int, G: int, device=None) -> torch.Tensor:
    """[3, N] int64: each token's frame, row and column on a G x G grid (tokens in raster order)."""
    n = torch.arange(N, device=device)
    return torch.stack((n // (G * G), (n % (G * G)) // G, n % G))


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype("rope3", dtype)  # bf16: storage only, x rounded once
    N = s["F"] * s["G"] * s["G"]
    # the layout the model hands the rotation: queries or keys [B, N, H, D] viewed as [B, H, N, D]
    x = randn((s["B"], N, s["H"], s["D"]), gen, device, dist).transpose(1, 2)
    return x.to(dt), s["G"]


def reference(x, grid):
    """The rotation in float64, segment by segment: x * cos(angle) + (-x[2i+1], x[2i]) * sin(angle)."""
    D = x.shape[-1]
    S, half = seg_width(D), seg_width(D) // 2
    x = x.double()
    pos = positions(x.shape[2], grid, x.device).double()  # [3, N]
    k = torch.arange(S, device=x.device) % half
    freq = THETA ** (-k.double() / half)  # [S]
    y = x.clone()  # the channels from 3S on stay as they are
    for s in range(3):
        seg = x[..., s * S:(s + 1) * S]
        pairs = seg.unflatten(-1, (half, 2))
        partner = torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)
        angle = pos[s][:, None] * freq[None, :]  # [N, S]
        y[..., s * S:(s + 1) * S] = seg * torch.cos(angle) + partner * torch.sin(angle)
    return y


def validate(x, grid):
    tensor("rope3", "x", x, FLOAT, 4)
    # x is the only tensor, so no other input's device refuses a 'meta' one (the other ops' do): a call
    # there would answer with no values
    if x.device.type == "meta":
        raise MageInputError("rope3", "x", "is on meta: it holds no values to rotate")
    if x.shape[-1] < 6:  # S >= 2: at least one pair an axis
        raise MageInputError("rope3", "x", f"must have at least 6 channels (a pair an axis), got {x.shape[-1]}")
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise MageInputError("rope3", "grid", f"must be an int of at least 1 (a frame's side in patches), got {grid!r}")


def random_shape(rnd):
    return dict(B=rnd.randint(1, 2), H=rnd.randint(1, 7), F=rnd.randint(1, 9), G=rnd.randint(1, 13),
                D=rnd.randint(6, 131))


def _elements(s) -> int:
    return s["B"] * s["H"] * s["F"] * s["G"] * s["G"] * s["D"]


def _rotated(s) -> int:
    return s["B"] * s["H"] * s["F"] * s["G"] * s["G"] * 3 * seg_width(s["D"])


def _shape(F, G=16, B=1, H=16, D=64):
    return dict(B=B, H=H, F=F, G=G, D=D)


SPEC = Op(
    name="rope3", kind="part", args=("x", "grid"),
    equation=(r"y_{bhn,sS+k} = x_{bhn,sS+k}\cos\theta_{nsk} + \tilde{x}_{bhn,sS+k}\sin\theta_{nsk},\ "
              r"\theta_{nsk} = p_s(n)\,10000^{-(k \bmod S/2)/(S/2)},\ "
              r"\tilde{x}_{2i} = -x_{2i+1},\ \tilde{x}_{2i+1} = x_{2i}"),
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda x, grid: (tuple(x.shape), x.dtype),
    # nominal, per rotated channel: the angle's product, its sine and cosine (one each), two products
    # and a sum; the channels passed through cost nothing
    flops=lambda s: 6 * _rotated(s),
    bytes=lambda s, isz=4: isz * 2 * _elements(s),  # x read once, y written once
    # field: the ViT-L/16 encoder at 16 frames (tubelets of 2: 8 frames of 16 x 16 patches, 16 heads of
    # 64 channels); large: at 64 frames; the sweep over clip length
    shapes={"field": [_shape(8)], "large": [_shape(32)],
            "sweep": [_shape(f) for f in (1, 2, 4, 8, 16, 32)]},
    # one token; an odd head (its last channel passed through); one pair an axis; a one-patch frame;
    # no batch
    awkward=[_shape(1, G=1, H=1), _shape(2, G=3, H=3, D=63), _shape(3, G=2, B=2, H=1, D=6),
             _shape(5, G=1, H=2, D=7), _shape(1, G=5, H=2, D=38), _shape(1, G=2, B=0, H=2)],
    random_shape=random_shape,
    dtypes=("fp32", "bf16"),  # bf16: storage; the angles and the rotation FP32 in the kernel
)
