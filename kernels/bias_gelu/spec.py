"""Bias + GELU, y = gelu(x + b): two steps that a fused kernel hands from one to the next without
storing the intermediate."""
from __future__ import annotations

import math

import torch

from mage.ops import FLOAT, Op, dim, randn, same_device, same_dtype, tensor, torch_dtype


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype("bias_gelu", dtype)  # bf16: storage only, every input rounded once
    x = randn((s["R"], s["C"]), gen, device, dist)
    b = randn((s["C"],), gen, device, dist, scale=0.5)
    return x.to(dt), b.to(dt)


def reference(x, b):
    """y = gelu(x + b) with the exact GELU: z * (1 + erf(z / sqrt 2)) / 2."""
    z = x.double() + b.double()
    return 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))


def validate(x, b):
    tensor("bias_gelu", "x", x, FLOAT, 2)
    tensor("bias_gelu", "b", b, FLOAT, 1)
    same_device("bias_gelu", {"x": x, "b": b})
    same_dtype("bias_gelu", {"x": x, "b": b})
    dim("bias_gelu", "b", b, 0, x.shape[1], "C, the columns of x")


def random_shape(rnd):
    return dict(R=rnd.randint(1, 3000), C=rnd.randint(1, 9000))


FIELD = [dict(R=2048, C=512)]
SPEC = Op(
    name="bias_gelu", args=("x", "b"), equation=r"y_{rc} = \mathrm{gelu}(x_{rc} + b_c)",
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda x, b: (tuple(x.shape), x.dtype),
    # nominal: add, scale, erf, add, two multiplies; erf counted as one operation
    flops=lambda s: 6 * s["R"] * s["C"],
    bytes=lambda s, isz=4: isz * (2 * s["R"] * s["C"] + s["C"]),  # x, y, b: all of x's dtype
    shapes={"field": FIELD, "large": [dict(R=16384, C=8192)],
            "sweep": [dict(R=r, C=1024) for r in (16, 64, 256, 1024, 4096, 16384, 65536, 131072)]},
    awkward=[dict(R=1, C=1), dict(R=1, C=1000), dict(R=3, C=4097), dict(R=37, C=129), dict(R=0, C=16)],
    random_shape=random_shape,
    dtypes=("fp32", "bf16"),  # bf16: storage; the sum and the GELU FP32 in every column
)
