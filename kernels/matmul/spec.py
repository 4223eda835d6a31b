"""Matrix multiplication, C_ij = sum_k A_ik B_kj: the operation where reuse hides in the equation
(neighbouring outputs share a row of A or a column of B)."""
from __future__ import annotations

from mage.errors import MageInputError
from mage.ops import FLOAT, Op, Target, dim, randn, same_device, tensor, torch_dtype


def make_inputs(s, gen, device, dtype, dist):
    dt = torch_dtype("matmul", dtype)
    A = randn((s["M"], s["K"]), gen, device, dist).to(dt)
    B = randn((s["K"], s["N"]), gen, device, dist).to(dt)
    return A, B


def reference(A, B):
    """C_ij = sum_k A_ik B_kj, in float64."""
    return A.double() @ B.double()


def validate(A, B):
    tensor("matmul", "A", A, FLOAT, 2)
    tensor("matmul", "B", B, FLOAT, 2)
    same_device("matmul", {"A": A, "B": B})
    if B.dtype != A.dtype:
        raise MageInputError("matmul", "B", f"has dtype {B.dtype}, but A has {A.dtype}")
    dim("matmul", "B", B, 0, A.shape[1], "K, the columns of A")


def reuse(config: dict) -> dict:
    """Per k step of one BLOCK_M x BLOCK_N output tile: distinct inputs loaded, multiply-adds, ratio
    (16 x 16 x 16 loads 512 values for 4096 multiply-adds: 8 per load)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    loads, fmas = bm * bk + bk * bn, bm * bn * bk
    return dict(loads=loads, fmas=fmas, fmas_per_load=fmas / loads)


def random_shape(rnd):
    return dict(M=rnd.randint(1, 1500), K=rnd.randint(1, 1500), N=rnd.randint(1, 1500))


SPEC = Op(
    name="matmul", label="matmul", short="matmul", order=10, marker="circle", work="flops",
    args=("A", "B"), equation=r"C_{ij} = \sum_k A_{ik} B_{kj}",
    make_inputs=make_inputs, reference=reference, validate=validate,
    out_spec=lambda A, B: ((A.shape[0], B.shape[1]), A.dtype),
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    bytes=lambda s, isz=4: isz * (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]),  # bf16 in, bf16 out
    # backward: dA = dC B^T and dB = A^T dC, two products the size of the forward; read A, B, dC, write dA, dB
    grad_flops=lambda s: 4 * s["M"] * s["N"] * s["K"],
    grad_bytes=lambda s, isz=4: isz * (2 * s["M"] * s["K"] + 2 * s["K"] * s["N"] + s["M"] * s["N"]),
    shapes={"field": [dict(M=1024, K=1024, N=1024)], "large": [dict(M=4096, K=4096, N=4096)],
            "sweep": [dict(M=n, K=n, N=n) for n in (64, 128, 256, 512, 1024, 2048, 3072, 4096, 8192)]},
    awkward=[dict(M=1, K=1, N=1), dict(M=1, K=37, N=5), dict(M=17, K=33, N=129),
             dict(M=130, K=7, N=65), dict(M=0, K=8, N=8), dict(M=67, K=200, N=3)],
    random_shape=random_shape, reuse=reuse,
    dtypes=("fp32", "fp32x3", "tf32", "bf16"),
    # Against cuBLAS (the 'pytorch' column) at the large shapes. fp32x3 has no PyTorch row: FP32
    # accuracy from the library is cuBLAS's FP32 SGEMM, so that is its baseline.
    targets=(Target("triton", "speedup", 0.90, baseline="pytorch"),
             Target("rust", "speedup", 0.70, baseline="pytorch"),
             Target("triton", "speedup", 2.0, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32"),
             Target("rust", "speedup", 1.5, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32"),
             # issue 14 asks the fp32x3 target at 8192^3 too: the size sweep's last point
             Target("triton", "speedup", 2.0, baseline="pytorch", dtype="fp32x3", baseline_dtype="fp32",
                    shape_set="sweep", shape=dict(M=8192, K=8192, N=8192)),
             Target("triton", "speedup", 0.90, baseline="pytorch", dtype="tf32"),
             Target("triton", "speedup", 0.95, baseline="pytorch", dtype="bf16")),
)
