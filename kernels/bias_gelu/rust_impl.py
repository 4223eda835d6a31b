"""The Rust columns of bias_gelu: 'rust', 'rust_ptx_py' and 'rust_native' (kernels/_rust). The kernel is
in rust.rs, what it takes in rust_table.py."""
import functools

from kernels import _rust

CONFIG = dict(ROWS=4, cols_per_thread=4, threads="ceil(C/4) to 256")


def _out_shape(x, b):
    return x.shape if b.shape[0] == x.shape[1] else None


def args(x, b, y):
    """The kernel's arguments, in its table's order."""
    return (x, b, y, *x.shape)


_rust.register_op("bias_gelu", "bias_gelu", args,
                  functools.partial(_rust.dense_prologue, "bias_gelu", (2, 1), _out_shape), CONFIG)
