"""The message-passing layer from Rust (rust_block.py, kernels/_rust/host/src/blocks.rs), at fp32 and
bf16. CPU: bad input named by block and argument, the library's own checks, the cuBLAS loader's error,
the launch count, the bf16 column's registration. GPU: against the float64 reference at 30+ random
shapes per precision (bf16: the reference of the bf16 inputs, the spec's bf16 tolerance), launches per
call, rust_native's output."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.support.kernel_checks import assert_refuses, gpu, gpu_failures, rel_err
from mage import ops, registry

rust = pytest.importorskip("kernels._rust")
from kernels._rust import native, register  # noqa: E402
from kernels.mp_block import rust_block  # noqa: E402

OP = "mp_block"
SPEC = ops.OPS[OP]
built = pytest.mark.skipif(rust.available() is not None, reason=str(rust.available()))
SMALL = dict(n=37, F=33, H=17, deg=24)


def test_bad_inputs_name_the_block_and_the_argument():
    graph, h, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(SMALL, seed=1)
    fn = rust_block.mp_block
    assert_refuses(fn, OP, "graph", (graph.rowptr, graph.col, graph.w), h, gamma, beta, W1, b1, W2, b2)
    assert_refuses(fn, OP, "h", graph, h[:-1], gamma, beta, W1, b1, W2, b2)
    assert_refuses(fn, OP, "gamma", graph, h, gamma[:-1], beta, W1, b1, W2, b2)
    assert_refuses(fn, OP, "W1", graph, h, gamma, beta, W1[:, :-1], b1, W2, b2)
    assert_refuses(fn, OP, "b1", graph, h, gamma, beta, W1, b1[:-1], W2, b2)
    assert_refuses(fn, OP, "W2", graph, h, gamma, beta, W1, b1, W2.t().contiguous(), b2)
    assert_refuses(fn, OP, "b2", graph, h, gamma, beta, W1, b1, W2, b2.bfloat16())
    assert_refuses(fn, OP, "out", graph, h, gamma, beta, W1, b1, W2, b2, out=torch.empty(37, 32))
    if not torch.cuda.is_available():
        assert_refuses(fn, OP, "rowptr", graph, h, gamma, beta, W1, b1, W2, b2)  # on the CPU: needs CUDA
    # bf16: the layer in bf16 throughout, a stray float32 weight refused by name
    graph, h, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(SMALL, seed=1, dtype="bf16")
    assert_refuses(fn, OP, "W1", graph, h, gamma, beta, W1.float(), b1, W2, b2)
    assert_refuses(fn, OP, "out", graph, h, gamma, beta, W1, b1, W2, b2, out=torch.empty(37, 33))


def _packed(n=40, F=3, H=5, **change):
    scratch = register.block_info(OP, n, F, H)[0]
    p = 1 << 20
    v = dict(rowptr=p, col=p, w=p, h=p, gamma=p, beta=p, W1=p, b1=p, W2=p, b2=p, y=p, plan=0, ws=0, flags=0,
             scratch=p, n=n, E=3 * n, F=F, H=H, tasks=n, parts=0, scratch_len=scratch, eps=1e-5)
    v.update(change)
    return list(v.values())


@built
@pytest.mark.parametrize("change,message", [
    (dict(col=0), "mp_block: col is a null pointer"), (dict(rowptr=0), "mp_block: rowptr is a null pointer"),
    (dict(F=0), "mp_block: F = 0"), (dict(H=0), "mp_block: H = 0"),
    (dict(tasks=7), "mp_block: without a plan there is one task per node"),
    (dict(plan=1 << 20, ws=1 << 20, flags=1 << 20), "mp_block: a plan with no partial sums"),
    (dict(parts=4, plan=1 << 20, flags=1 << 20), "mp_block: ws is a null pointer"),
])
def test_the_library_checks_name_the_block_and_the_argument(change, message):
    register.block_check(OP, _packed())
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT") as e:
        register.block_check(OP, _packed(**change))
    assert message in str(e.value)


@built
def test_the_library_states_the_launches():
    assert register.block_info(OP, 37, 33, 17)[1] == rust_block.LAUNCHES == rust_block.launches({})


@built
def test_a_missing_cublas_is_named_with_the_block(tmp_path):
    code = ("from kernels._rust import register\n"
            "try:\n    register.block_cublas('mp_block')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, MAGE_CUBLAS=str(tmp_path / "nothing-here.so"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "MAGE_NO_CUBLAS" in out and "mp_block: cannot load cuBLAS" in out and "nothing-here.so" in out, out


# ---- bf16 without a GPU -------------------------------------------------------------------------------
def test_bf16_is_registered_beside_fp32():
    impl, native_impl = registry.get(OP, "rust", "bf16"), registry.get(OP, "rust_native", "bf16")
    assert impl.fn is registry.get(OP, "rust").fn and impl.prepare is registry.get(OP, "rust").prepare
    assert "GemmEx bf16" in impl.config["gemm"] and impl.config["launches"] == rust_block.LAUNCHES
    assert native_impl.config["kernel"] == "mp_block.bf16" and native_impl.kernels_of == "rust"


@built
def test_bf16_library_checks_and_launches():
    name = register.block_name(OP, "bf16")
    register.block_check(name, _packed())
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT") as e:
        register.block_check(name, _packed(tasks=7))
    assert "mp_block: without a plan there is one task per node" in str(e.value)
    assert register.block_info(name, 37, 33, 17) == register.block_info(OP, 37, 33, 17)
    assert register.block_info(name, 37, 33, 17)[1] == rust_block.LAUNCHES


# ---- on a GPU ---------------------------------------------------------------------------------------
@gpu
@built
def test_gpu_rust_block_at_random_shapes():
    impl = registry.get(OP, "rust")
    assert impl.runs_on("cuda") is None, impl.runs_on("cuda")
    failures = gpu_failures(impl, SPEC.random_shapes(30, seed=7) + SPEC.awkward + SPEC.shapes["field"])
    assert not failures, failures[:5]


@gpu
@built
def test_gpu_launches_per_call():
    from mage.profile import profile
    impl = registry.get(OP, "rust")
    for shape in (SPEC.shapes["field"][0], SMALL):
        inputs = impl.prepare(*SPEC.inputs(shape, seed=0, device="cuda"))
        counts = [profile(lambda: impl.fn(*inputs), iters=20) for _ in range(2)]
        print(f"\n{OP}/rust {ops.shape_key(shape)}: {counts[0].launches:g} launches: {counts[0].kernel_names}")
        assert counts[0].launches == counts[1].launches, "launches per call must be stable"
        # cuBLAS may split K at a small shape (a splitKreduce kernel more per GEMM): what the block states is
        # its count where cuBLAS runs one kernel per GEMM, the field shape; elsewhere only cuBLAS adds any
        if shape == SPEC.shapes["field"][0]:
            assert counts[0].launches == rust_block.launches({}), counts[0].kernel_names
        else:
            assert counts[0].launches >= rust_block.launches({}), counts[0].kernel_names


@gpu
@built
def test_gpu_rust_native_computes_the_same_output():
    if native.available():
        pytest.skip(native.available())
    for k, shape in enumerate([SMALL, dict(n=40, F=3, H=5, deg=2), SPEC.shapes["field"][0]]):
        inputs = SPEC.inputs(shape, seed=k, device="cuda")
        via_c = registry.get(OP, "rust").fn(*inputs).cpu()
        via_bin = native.block_output(OP, rust_block.native_values, inputs)
        assert rel_err(via_bin, SPEC.reference(*inputs).cpu()) < SPEC.tol("fp32")
        assert torch.equal(via_bin, via_c), float((via_bin - via_c).abs().max())


# ---- bf16 on a GPU ----------------------------------------------------------------------------------
@gpu
@built
def test_gpu_bf16_rust_block_at_random_shapes():
    impl = registry.get(OP, "rust", "bf16")
    assert impl.runs_on("cuda") is None, impl.runs_on("cuda")
    failures = gpu_failures(impl, SPEC.random_shapes(30, seed=17) + SPEC.awkward + SPEC.shapes["field"])
    assert not failures, failures[:5]


@gpu
@built
def test_gpu_bf16_output_is_bf16_and_near_the_triton_block():
    inputs = SPEC.inputs(SMALL, seed=3, device="cuda", dtype="bf16")
    ref = SPEC.reference(*inputs)
    out = torch.full(tuple(inputs[1].shape), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert rust_block.mp_block(*inputs, out=out) is out
    err, tri = rel_err(out, ref), rel_err(registry.get(OP, "triton", "bf16").fn(*inputs), ref)
    print(f"\n{OP}/rust bf16: rel error {err:.2e} (triton bf16 {tri:.2e}, tolerance {SPEC.tol('bf16'):.0e})")
    # bf16 storage alone costs about 2^-9; FP32 math keeps the layer near that, as the Triton block
    assert 1e-4 < err < SPEC.tol("bf16") / 2 and err < 2 * tri + 1e-3


@gpu
@built
def test_gpu_bf16_launches_per_call():
    from mage.profile import profile
    impl = registry.get(OP, "rust", "bf16")
    for shape in (SPEC.shapes["field"][0], SMALL):
        inputs = impl.prepare(*SPEC.inputs(shape, seed=0, device="cuda", dtype="bf16"))
        counts = [profile(lambda: impl.fn(*inputs), iters=20) for _ in range(2)]
        print(f"\n{OP}/rust bf16 {ops.shape_key(shape)}: {counts[0].launches:g} launches: {counts[0].kernel_names}")
        assert counts[0].launches == counts[1].launches, "launches per call must be stable"
        assert any("bf16" in k for k in counts[0].kernel_names), counts[0].kernel_names  # the bf16 kernels ran
        if shape == SPEC.shapes["field"][0]:  # as at fp32: elsewhere cuBLAS may split K (more kernels)
            assert counts[0].launches == rust_block.launches({}), counts[0].kernel_names
        else:
            assert counts[0].launches >= rust_block.launches({}), counts[0].kernel_names


@gpu
@built
def test_gpu_bf16_rust_native_computes_the_same_output():
    if native.available():
        pytest.skip(native.available())
    for k, shape in enumerate([SMALL, dict(n=40, F=3, H=5, deg=2), SPEC.shapes["field"][0]]):
        inputs = SPEC.inputs(shape, seed=k, device="cuda", dtype="bf16")
        via_c = registry.get(OP, "rust", "bf16").fn(*inputs).cpu()
        via_bin = native.block_output(OP, rust_block.native_values, inputs)
        assert via_bin.dtype == torch.bfloat16
        assert rel_err(via_bin, SPEC.reference(*inputs).cpu()) < SPEC.tol("bf16")
        assert torch.equal(via_bin, via_c), float((via_bin.float() - via_c.float()).abs().max())
