"""The tiny block the service tests serve (tests/test_service.py, tests/test_service_executor.py): one
matrix product with a batch axis, defined here only, and the body of a fixture that adds it to the specs for one test."""
from __future__ import annotations

import math

from mage import facets, ops
from mage.ext.service.batching import Batching
from mage.ops import Op


def _validate(x, w):
    ops.tensor("tiny_block", "x", x, ops.FLOAT, 2)
    ops.tensor("tiny_block", "w", w, ops.FLOAT, 2)
    ops.dim("tiny_block", "w", w, 0, x.shape[1], "d, the channels of x")


TINY = Op(
    name="tiny_block", args=("x", "w"), equation=r"y = x W", kind="block",
    make_inputs=lambda s, gen, device, dtype, dist: (
        ops.randn((s["T"], s["d"]), gen, device, dist).to(ops.TORCH_DTYPE[dtype]),
        (ops.randn((s["d"], s["d"]), gen, device, "normal") / math.sqrt(s["d"])).to(ops.TORCH_DTYPE[dtype])),
    reference=lambda x, w: x.double() @ w.double(), validate=_validate,
    out_spec=lambda x, w: ((x.shape[0], w.shape[1]), x.dtype),
    flops=lambda s: 2 * s["T"] * s["d"] ** 2, bytes=lambda s, isz=4: isz * (2 * s["T"] * s["d"] + s["d"] ** 2),
    shapes={"field": [dict(T=8, d=16)], "large": [dict(T=64, d=64)], "sweep": [dict(T=8, d=16), dict(T=32, d=16)]},
    awkward=[dict(T=1, d=3)], random_shape=lambda rnd: dict(T=rnd.randint(1, 9), d=rnd.randint(1, 9)),
    dtypes=("fp32", "bf16"),
)
facets.declare(TINY.name, label="tiny block", order=199, batch=Batching(size="T", axes={"x": 0}, out_axis=0, items=4))


def tiny_in_specs():
    """The tiny block among the specs for one test, then gone (other tests see the five operations): a
    fixture's body; each test file makes it its fixture ``tiny_op``."""
    ops.OPS.add(TINY)
    yield TINY
    dict.pop(ops.OPS, TINY.name, None)
