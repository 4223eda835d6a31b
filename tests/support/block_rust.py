"""What the model blocks' Rust tests share (kernels/<block>/tests/test_<block>_rust.py): the library's own
argument checks, the bf16 column registered beside fp32, and on a GPU the float64 check at random shapes,
the launches per call and rust_native's output. Each block's file passes its own packed arguments and
shapes. Import it after ``pytest.importorskip("kernels._rust")``."""
from __future__ import annotations

import pytest
import torch

import kernels._rust as rust
from kernels._rust import native, register
from mage import ops, registry
from tests.support.kernel_checks import gpu_failures, rel_err, usable

built = pytest.mark.skipif(rust.available() is not None, reason=str(rust.available()))


def library_refuses(name: str, good: list, bad: list, message: str) -> None:
    """The library's checks pass ``good`` and refuse ``bad`` with MAGE_BAD_ARGUMENT and ``message``."""
    register.block_check(name, good)
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT") as e:
        register.block_check(name, bad)
    assert message in str(e.value)


def bf16_registered(op: str, rust_block) -> None:
    """The bf16 column is the fp32 column's function (the inputs' dtype picks the block), with bf16 GEMMs
    and the same launches; rust_native runs the block's bf16 kernel."""
    impl, native_impl = registry.get(op, "rust", "bf16"), registry.get(op, "rust_native", "bf16")
    assert impl.fn is registry.get(op, "rust").fn and impl.prepare is registry.get(op, "rust").prepare
    assert "GemmEx bf16" in impl.config["gemm"] and impl.config["launches"] == rust_block.LAUNCHES
    assert native_impl.config["kernel"] == f"{op}.bf16" and native_impl.kernels_of == "rust"


def bf16_library_names_the_block(op: str, rust_block, good: list, bad: list, message: str, sizes: tuple) -> None:
    """The bf16 block's checks name the block without its precision; its scratch and launches are fp32's."""
    name = register.block_name(op, "bf16")
    library_refuses(name, good, bad, message)
    assert register.block_info(name, *sizes) == register.block_info(op, *sizes)
    assert register.block_info(name, *sizes)[1] == rust_block.LAUNCHES


# ---- on a GPU ---------------------------------------------------------------------------------------
def gpu_random_shapes(op: str, dtype: str, seed: int) -> None:
    spec, impl = ops.OPS[op], registry.get(op, "rust", dtype)
    usable(impl)
    failures = gpu_failures(impl, spec.random_shapes(30, seed=seed) + spec.awkward + spec.shapes["field"])
    assert not failures, failures[:5]


def gpu_launches_per_call(op: str, rust_block, dtype: str, other: dict) -> None:
    """Stable launches per call at the field shape (the count the block states: cuBLAS runs one kernel per
    GEMM there) and at ``other`` (at least that count: cuBLAS may split K at a small shape)."""
    from mage.profile import profile
    spec, impl = ops.OPS[op], registry.get(op, "rust", dtype)
    for shape in (spec.shapes["field"][0], other):
        raw = spec.inputs(shape, seed=0, device="cuda", dtype=dtype)
        inputs = impl.prepare(*raw) if impl.prepare else raw
        counts = [profile(lambda: impl.fn(*inputs), iters=20) for _ in range(2)]
        print(f"\n{op}/rust {dtype} {ops.shape_key(shape)}: {counts[0].launches:g} launches: {counts[0].kernel_names}")
        assert counts[0].launches == counts[1].launches, "launches per call must be stable"
        if dtype == "bf16":
            assert any("bf16" in k for k in counts[0].kernel_names), counts[0].kernel_names  # the bf16 kernels ran
        if shape == spec.shapes["field"][0]:
            assert counts[0].launches == rust_block.launches({}), counts[0].kernel_names
        else:
            assert counts[0].launches >= rust_block.launches({}), counts[0].kernel_names


def gpu_native_same_output(op: str, rust_block, dtype: str, shapes) -> None:
    """rust_native (the binary) computes the library call's output bit for bit, within the tolerance."""
    if native.available():
        pytest.skip(native.available())
    spec = ops.OPS[op]
    for k, shape in enumerate(shapes):
        inputs = spec.inputs(shape, seed=k, device="cuda", dtype=dtype)
        via_c = registry.get(op, "rust", dtype).fn(*inputs).cpu()
        via_bin = native.block_output(op, rust_block.native_values, inputs)
        assert dtype != "bf16" or via_bin.dtype == torch.bfloat16
        assert rel_err(via_bin, spec.reference(*inputs).cpu()) < spec.tol(dtype)
        assert torch.equal(via_bin, via_c), float((via_bin.float() - via_c.float()).abs().max())


def gpu_bf16_near_the_triton_block(op: str, fn, inputs, out_like) -> None:
    """The bf16 block writes a bf16 ``out`` within about bf16's storage error of float64, near the Triton
    block's bf16 error (FP32 math keeps both near the 2^-9 that storage alone costs)."""
    spec = ops.OPS[op]
    ref = spec.reference(*inputs)
    out = torch.full(tuple(out_like.shape), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert fn(*inputs, out=out) is out
    err, tri = rel_err(out, ref), rel_err(registry.get(op, "triton", "bf16").fn(*inputs), ref)
    print(f"\n{op}/rust bf16: rel error {err:.2e} (triton bf16 {tri:.2e}, tolerance {spec.tol('bf16'):.0e})")
    assert 1e-4 < err < spec.tol("bf16") / 2 and err < 2 * tri + 1e-3
