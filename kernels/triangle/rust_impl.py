"""The Rust columns of triangle: 'rust', 'rust_ptx_py' and 'rust_native' (kernels/_rust). The kernels are
in rust.rs, what they take in rust_table.py."""
import functools

from kernels import _rust

# The kernels by version number (``_rust.variant("triangle", v)``): 64 x 64 tiles of 512 threads,
# 64 x 32 tiles of 256 threads.
VERSIONS = ("triangle", "triangle_256")
DEFAULT = 0  # what 'rust' runs
CONFIG = dict(BLOCK_I=64, BLOCK_J=64, BLOCK_C=8, BLOCK_K=4, threads=512, per_thread="8x8")


def _out_shape(A, B):
    return A.shape if A.shape == B.shape and A.shape[0] == A.shape[1] else None


def args(A, B, O):
    """The kernel's arguments, in its table's order."""
    return (A, B, O, A.shape[0], A.shape[2])


_rust.register_op("triangle", VERSIONS[DEFAULT], args,
                  functools.partial(_rust.dense_prologue, "triangle", (3, 3), _out_shape), CONFIG,
                  versions=VERSIONS)
