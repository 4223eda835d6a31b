"""Matrix multiplication, C_ij = sum_k A_ik B_kj: the operation where reuse hides in the equation
(neighbouring outputs share a row of A or a column of B)."""
from __future__ import annotations

from mage.errors import MageInputError
from mage.ops import FLOAT, Op, dim, randn, same_device, tensor, torch_dtype


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype("matmul", dtype)
    A = randn((s["M"], s["K"]), gen, device, dist).to(dt)
    B = randn((s["K"], s["N"]), gen, device, dist).to(dt)
    return A, B


def reference(A, B):
    """C_ij = sum_k A_ik B_kj, in float64."""
    return A.double() @ B.double()


def magnitude(A, B):
    """sum_k |A_ik| |B_kj| in float64: the size of C_ij's terms, by which its rounding goes."""
    return A.double().abs() @ B.double().abs()


def validate(A, B):
    tensor("matmul", "A", A, FLOAT, 2)
    tensor("matmul", "B", B, FLOAT, 2)
    same_device("matmul", {"A": A, "B": B})
    if B.dtype != A.dtype:
        raise MageInputError("matmul", "B", f"has dtype {B.dtype}, but A has {A.dtype}")
    dim("matmul", "B", B, 0, A.shape[1], "K, the columns of A")


def random_shape(rnd):
    return dict(M=rnd.randint(1, 1500), K=rnd.randint(1, 1500), N=rnd.randint(1, 1500))


SPEC = Op(
    name="matmul", args=("A", "B"), equation=r"C_{ij} = \sum_k A_{ik} B_{kj}",
    make_inputs=make_inputs, reference=reference, validate=validate, magnitude=magnitude,
    out_spec=lambda A, B: ((A.shape[0], B.shape[1]), A.dtype),
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    bytes=lambda s, isz=4: isz * (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]),  # bf16 in, bf16 out
    shapes={"field": [dict(M=1024, K=1024, N=1024)], "large": [dict(M=4096, K=4096, N=4096)],
            "sweep": [dict(M=n, K=n, N=n) for n in (64, 128, 256, 512, 1024, 2048, 3072, 4096, 8192)]},
    awkward=[dict(M=1, K=1, N=1), dict(M=1, K=37, N=5), dict(M=17, K=33, N=129),
             dict(M=130, K=7, N=65), dict(M=0, K=8, N=8), dict(M=67, K=200, N=3)],
    random_shape=random_shape,
    dtypes=("fp32", "fp32x3", "tf32", "bf16"),
)
