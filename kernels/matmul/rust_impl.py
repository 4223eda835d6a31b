"""The Rust columns of matmul: 'rust' (the tiled kernel through the C ABI), 'rust_scalar' (one thread an
output), 'rust_ptx_py' and 'rust_native' (kernels/_rust). The kernels are in rust.rs, what they take in
rust_table.py."""
import functools

from kernels import _rust

# The kernels by version number (``_rust.variant("matmul", v)``): scalar, tiled, tiled for 2 blocks/SM.
VERSIONS = ("matmul_scalar", "matmul", "matmul_2cta")
DEFAULT = 1  # what 'rust' runs
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=8, threads=256, per_thread="8x8")
SCALAR_CONFIG = dict(threads="16x16", per_thread="1 output")


def _out_shape(A, B):
    return (A.shape[0], B.shape[1]) if A.shape[1] == B.shape[0] else None


def args(A, B, C):
    """The kernel's arguments, in its table's order."""
    (M, K), N = A.shape, B.shape[1]
    return (A, B, C, M, K, N)


_rust.register_op("matmul", VERSIONS[DEFAULT], args,
                  functools.partial(_rust.dense_prologue, "matmul", (2, 2), _out_shape), CONFIG,
                  versions=VERSIONS, extra={"rust_scalar": (VERSIONS[0], SCALAR_CONFIG)})
