"""LayerNorm over the last dimension: two reductions (mean, variance) choose what survives of a row,
and the threads that computed parts of a row must meet to finish them."""
from __future__ import annotations

import torch

from mage.errors import MageInputError
from mage.ops import FLOAT, Op, dim, randn, same_device, same_dtype, tensor, torch_dtype

EPS = 1e-5


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype("layernorm", dtype)  # bf16: storage only, every input rounded once
    x = randn((s["R"], s["C"]), gen, device, dist) + 0.5  # an offset the mean must remove
    gamma = 1.0 + 0.1 * randn((s["C"],), gen, device, "normal")
    beta = 0.1 * randn((s["C"],), gen, device, "normal")
    return x.to(dt), gamma.to(dt), beta.to(dt)


def reference(x, gamma, beta):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dimension (biased variance)."""
    x = x.double()
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * gamma.double() + beta.double()


def validate(x, gamma, beta):
    tensor("layernorm", "x", x, FLOAT, 2)
    tensor("layernorm", "gamma", gamma, FLOAT, 1)
    tensor("layernorm", "beta", beta, FLOAT, 1)
    same_device("layernorm", {"x": x, "gamma": gamma, "beta": beta})
    same_dtype("layernorm", {"x": x, "gamma": gamma, "beta": beta})
    dim("layernorm", "gamma", gamma, 0, x.shape[1], "C, the columns of x")
    dim("layernorm", "beta", beta, 0, x.shape[1], "C, the columns of x")
    if x.shape[1] == 0:
        raise MageInputError("layernorm", "x", "must have at least one column to normalise over")


def random_shape(rnd):
    return dict(R=rnd.randint(1, 3000), C=rnd.choice([rnd.randint(1, 9000), rnd.randint(8193, 20000)]))


SPEC = Op(
    name="layernorm", args=("x", "gamma", "beta"),
    equation=r"y_{rc} = \frac{x_{rc} - \mu_r}{\sqrt{\sigma_r^2 + \epsilon}}\,\gamma_c + \beta_c",
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda x, g, b: (tuple(x.shape), x.dtype),
    # nominal: sum, (x - mean)^2 sum, normalise (subtract, multiply), affine (multiply-add)
    flops=lambda s: 8 * s["R"] * s["C"],
    bytes=lambda s, isz=4: isz * (2 * s["R"] * s["C"] + 2 * s["C"]),  # x, y, gamma, beta: all of x's dtype
    shapes={"field": [dict(R=1024, C=1024)], "large": [dict(R=32768, C=4096)],
            "sweep": [dict(R=r, C=1024) for r in (16, 64, 256, 1024, 4096, 16384, 65536, 131072)]},
    awkward=[dict(R=1, C=1), dict(R=1, C=4099), dict(R=5, C=8193), dict(R=33, C=1000), dict(R=0, C=64)],
    random_shape=random_shape,
    dtypes=("fp32", "bf16"),  # bf16: storage; statistics and arithmetic FP32 in every column
)
