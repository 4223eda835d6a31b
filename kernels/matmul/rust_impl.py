"""The Rust columns of matmul: 'rust' (the tiled kernel through the C ABI), 'rust_scalar' (one thread an
output), 'rust_ptx_py' and 'rust_native' (kernels/_rust), and 'rust' at precision fp32x3 (FP32 accuracy
on the tensor cores: three TF32 mma.sync products a step). The kernels are in rust.rs, what they take in
rust_table.py."""
import functools

from mage.registry import Impl, add

from kernels import _rust
from kernels._rust.register import LOOK

# The kernels by version number (``_rust.variant("matmul", v)``): scalar, tiled, tiled for 2 blocks/SM,
# and the tensor-core kernel (precision fp32x3).
VERSIONS = ("matmul_scalar", "matmul", "matmul_2cta", "matmul_fp32x3")
DEFAULT = 1  # what 'rust' runs at fp32
FP32X3 = 3  # what 'rust' runs at fp32x3
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=8, threads=256, per_thread="8x8")
SCALAR_CONFIG = dict(threads="16x16", per_thread="1 output")
FP32X3_CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=16, threads=256, warp_tile="64x32", GROUP_M=8,
                     mma="m16n8k8.tf32", products=3, stages=2)


def _out_shape(A, B):
    return (A.shape[0], B.shape[1]) if A.shape[1] == B.shape[0] else None


def args(A, B, C):
    """The kernel's arguments, in its table's order."""
    (M, K), N = A.shape, B.shape[1]
    return (A, B, C, M, K, N)


_prologue = functools.partial(_rust.dense_prologue, "matmul", (2, 2), _out_shape)
_rust.register_op("matmul", VERSIONS[DEFAULT], args, _prologue, CONFIG,
                  versions=VERSIONS, extra={"rust_scalar": (VERSIONS[0], SCALAR_CONFIG)})


def matmul_fp32x3(A, B, out=None):
    """C = A @ B at FP32 accuracy on the tensor cores (the same checks as every Rust column)."""
    y, dev = _prologue((A, B), out)
    if y.numel():  # K = 0 still launches: the kernel writes the zeros
        _rust.launch(VERSIONS[FP32X3], dev, _rust.addresses(args(A, B, y)))
    return y


_label, _order, _color = LOOK["rust"]
add(Impl(op="matmul", name="rust", fn=matmul_fp32x3, dtype="fp32x3", family="rust", label=_label, order=_order,
         color=_color, needs_cuda=True, available=_rust.available, config=dict(FP32X3_CONFIG, launch="C ABI")))
