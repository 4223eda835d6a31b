"""Triangle contraction, O_ijc = sum_k A_ikc B_jkc: two relations (i, k) and (j, k) meet at k, the
outgoing triangle update of protein structure models."""
from __future__ import annotations

import torch

from mage.errors import MageInputError
from mage.ops import FLOAT, Op, dim, randn, same_device, same_dtype, tensor, torch_dtype


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype("triangle", dtype)  # bf16: storage only, each input rounded once; fp32x3 stores FP32
    A = randn((s["N"], s["N"], s["C"]), gen, device, dist)
    B = randn((s["N"], s["N"], s["C"]), gen, device, dist)
    return A.to(dt), B.to(dt)


def reference(A, B):
    """O_ijc = sum_k A_ikc B_jkc: edges (i, k) and (j, k) meet at k (outgoing triangle update)."""
    return torch.einsum("ikc,jkc->ijc", A.double(), B.double())


def validate(A, B):
    tensor("triangle", "A", A, FLOAT, 3)
    tensor("triangle", "B", B, FLOAT, 3)
    same_device("triangle", {"A": A, "B": B})
    same_dtype("triangle", {"A": A, "B": B})
    dim("triangle", "A", A, 1, A.shape[0], "A must be [N, N, C]")
    if tuple(B.shape) != tuple(A.shape):
        raise MageInputError("triangle", "B", f"must have A's shape {tuple(A.shape)}, got {tuple(B.shape)}")


def random_shape(rnd):
    return dict(N=rnd.randint(1, 200), C=rnd.randint(1, 150))


SPEC = Op(
    name="triangle", args=("A", "B"), equation=r"O_{ijc} = \sum_k A_{ikc} B_{jkc}",
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda A, B: (tuple(A.shape), A.dtype),
    flops=lambda s: 2 * s["N"] ** 3 * s["C"],
    bytes=lambda s, isz=4: isz * 3 * s["N"] * s["N"] * s["C"],  # A, B, O: all of A's dtype
    shapes={"field": [dict(N=128, C=64)], "large": [dict(N=384, C=128)],
            "sweep": [dict(N=n, C=128) for n in (16, 32, 64, 96, 128, 192, 256, 384)]},
    awkward=[dict(N=1, C=1), dict(N=5, C=3), dict(N=17, C=33), dict(N=33, C=65), dict(N=0, C=4)],
    random_shape=random_shape,
    # fp32x3: FP32 storage and tolerance, each product as three TF32 tensor-core products. bf16: storage;
    # the products (exact in FP32) and the sum over k FP32 in every column, the output rounded once
    dtypes=("fp32", "fp32x3", "bf16"),
)
