"""The Rust columns of matmul: 'rust' (the tiled kernel through the C ABI), 'rust_scalar' (one thread an
output), 'rust_ptx_py' and 'rust_native' (kernels/_rust), and 'rust' at precision fp32x3 (FP32 accuracy
on the tensor cores: three TF32 mma.sync products a step). The kernels are in rust.rs, what they take in
rust_table.py. The fp32x3 row sweeps its kernel versions (``python -m mage measure --tiles-only --impls
rust --dtypes fp32x3``), so one run compares them with every version checked first. The FMA row has no
sweep: the default tile sweep (fp32) would mix its versions into the Triton kernel's tile table; its
versions are compared by ``_rust.variant`` (test_matmul.py's GPU comparison)."""
import dataclasses
import functools

from kernels import _rust
from mage.registry import Impl, add, get

# The kernels by version number (``_rust.variant("matmul", v)``): scalar, tiled, tiled for 2 blocks/SM,
# tiled with 16-deep slices, and the tensor-core kernel with either split of the operands.
VERSIONS = ("matmul_scalar", "matmul", "matmul_2cta", "matmul_k16", "matmul_fp32x3", "matmul_fp32x3_bits")
DEFAULT = 1  # what 'rust' runs at fp32
FP32X3 = 4  # what 'rust' runs at fp32x3
_FMA = dict(BLOCK_M=128, BLOCK_N=128, threads=256, per_thread="8x8")
_TC = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=16, threads=256, warp_tile="64x32", GROUP_M=8,
           mma="m16n8k8.tf32", products=3, stages=2)
CONFIGS = {  # kernel -> the config recorded with its rows
    "matmul": dict(_FMA, BLOCK_K=8), "matmul_2cta": dict(_FMA, BLOCK_K=8, blocks_per_sm=2),
    "matmul_k16": dict(_FMA, BLOCK_K=16),
    "matmul_fp32x3": dict(_TC, split="cvt.rna.tf32.f32"), "matmul_fp32x3_bits": dict(_TC, split="integer"),
}
CONFIG = CONFIGS[VERSIONS[DEFAULT]]
SCALAR_CONFIG = dict(threads="16x16", per_thread="1 output")
SWEEP = {"fp32x3": ("matmul_fp32x3", "matmul_fp32x3_bits")}


def _out_shape(A, B):
    return (A.shape[0], B.shape[1]) if A.shape[1] == B.shape[0] else None


def args(A, B, C):
    """The kernel's arguments, in its table's order."""
    (M, K), N = A.shape, B.shape[1]
    return (A, B, C, M, K, N)


_prologue = functools.partial(_rust.dense_prologue, "matmul", (2, 2), _out_shape)
_rust.register_op("matmul", VERSIONS[DEFAULT], args, _prologue, CONFIG,
                  versions=VERSIONS, extra={"rust_scalar": (VERSIONS[0], SCALAR_CONFIG)})
# The one-thread-an-output kernel is the teaching baseline: 42 ms a call at 4096^3 (run 092321Z), so
# 8192^3 (the sweep's last point) would be about 0.34 s a call and minutes a case. It stops at 4096^3.
add(dataclasses.replace(get("matmul", "rust_scalar"), max_flops=2 * 4096 ** 3))


def _launcher(kernel: str):
    def fn(A, B, out=None):
        """C = A @ B by ``kernel`` (the same checks as every Rust column)."""
        y, dev = _prologue((A, B), out)
        if y.numel():  # K = 0 still launches: the kernel writes the zeros
            _rust.launch(kernel, dev, _rust.addresses(args(A, B, y)))
        return y
    fn.__name__ = fn.__qualname__ = f"rust_{kernel}"
    return fn


def _variant(base: Impl, kernel: str = "") -> Impl:
    """``base`` running ``kernel`` instead (one of its dtype's SWEEP)."""
    from mage.errors import MageInputError
    if kernel not in SWEEP[base.dtype]:
        raise MageInputError("matmul", "kernel", f"must be one of {SWEEP[base.dtype]} at {base.dtype}, got {kernel!r}")
    return dataclasses.replace(base, fn=_launcher(kernel), config=dict(CONFIGS[kernel], kernel=kernel, launch="C ABI"),
                               sweep=(), variant=None)


def _with_sweep(impl: Impl) -> Impl:
    return dataclasses.replace(impl, sweep=tuple(dict(kernel=k) for k in SWEEP[impl.dtype]),
                               variant=lambda **cfg: _variant(impl, **cfg))


# The tensor-core column. Its first version missed the FP32 tolerance on the H200 (the tensor cores'
# truncating accumulate fed the running sum over all of K back into every mma); the kernel now adds each
# K stage's products into a zeroed accumulator and rounds once per stage (kernels/NOTES.md, issue 14).
FP32X3_IMPL = _with_sweep(Impl(op="matmul", name="rust", fn=_launcher(VERSIONS[FP32X3]), dtype="fp32x3",
                               family="rust", needs_cuda=True,
                               available=_rust.available, config=dict(CONFIGS[VERSIONS[FP32X3]], launch="C ABI")))
add(FP32X3_IMPL)
