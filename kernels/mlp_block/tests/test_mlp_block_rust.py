"""The MLP block from Rust (rust_block.py, kernels/_rust/host/src/blocks.rs), at fp32 and bf16. CPU: bad
input named by block and argument (in Python and in the library's own checks), the cuBLAS loader's
error, the launch count the library states, the bf16 column's registration. GPU: against the float64
reference at 30+ random shapes per precision (bf16: the reference of the bf16 inputs, the spec's bf16
tolerance), launches per call, and rust_native computing the same output."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.support.kernel_checks import assert_refuses, gpu, gpu_failures, rel_err
from mage import ops, registry
from mage.check import check

rust = pytest.importorskip("kernels._rust")
from kernels._rust import native, register  # noqa: E402
from kernels.mlp_block import rust_block  # noqa: E402
from kernels.mlp_block.tests.bad_inputs import bad_cases, good  # noqa: E402

OP = "mlp_block"
SPEC = ops.OPS[OP]
built = pytest.mark.skipif(rust.available() is not None, reason=str(rust.available()))


def test_bad_inputs_name_the_block_and_the_argument():
    for arg, inputs in bad_cases():
        assert_refuses(rust_block.mlp_block, OP, arg, *inputs)
    assert_refuses(rust_block.mlp_block, OP, "out", *good(), out=torch.empty(5, 36))
    if not torch.cuda.is_available():
        assert_refuses(rust_block.mlp_block, OP, "x", *good())  # on the CPU: needs a CUDA device


def _packed(T=5, d=37, H=19, **change):
    scratch = register.block_info(OP, T, d, H)[0]
    v = dict(x=1 << 20, gamma=1 << 20, beta=1 << 20, W1=1 << 20, b1=1 << 20, W2=1 << 20, b2=1 << 20, y=1 << 20,
             scratch=1 << 20, T=T, d=d, H=H, scratch_len=scratch, eps=1e-5)
    v.update(change)
    return list(v.values())


@built
@pytest.mark.parametrize("change,message", [
    (dict(W1=0), "mlp_block: W1 is a null pointer"), (dict(y=0), "mlp_block: y is a null pointer"),
    (dict(T=-3), "mlp_block: T = -3 must not be negative"), (dict(d=0), "mlp_block: d = 0"),
    (dict(scratch_len=10), "mlp_block: scratch holds 10 floats"), (dict(eps=0.0), "mlp_block: eps = 0"),
])
def test_the_library_checks_name_the_block_and_the_argument(change, message):
    register.block_check(OP, _packed())
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT") as e:
        register.block_check(OP, _packed(**change))
    assert message in str(e.value)


@built
def test_the_library_states_the_launches_and_the_scratch():
    floats, launches = register.block_info(OP, 5, 37, 19)
    assert launches == rust_block.LAUNCHES == rust_block.launches({})
    assert floats >= 5 * 37 + 2 * 5 * 19 + 5  # LN output, z, g, ones
    with pytest.raises(rust.RustKernelError, match="no block named"):
        register.block_info("trimul_block", 1, 1, 1)


@built
def test_a_missing_cublas_is_named_with_the_block_and_the_override(tmp_path):
    # in a process of its own: a cuBLAS already loaded here would be kept
    missing = tmp_path / "libcublas.so.12"
    code = ("from kernels._rust import register\n"
            "try:\n    register.block_cublas('mlp_block')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, MAGE_CUBLAS=str(missing))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "RustKernelError MAGE_NO_CUBLAS" in out and "mlp_block: cannot load cuBLAS" in out, out
    assert str(missing) in out and "MAGE_CUBLAS" in out and "nvidia-cublas-cu12" in out


def test_rust_native_block_file_uploads_inputs_and_sizes_outputs():
    x, y = torch.ones(2, 3), torch.empty(2, 3)
    data = native.block_args_file((x, y, 2, 1e-5), outputs={1})
    assert data[:4] == (4).to_bytes(4, "little")
    assert len(data) == 4 + 4 * 9 + x.numel() * 4  # y travels as its size only


@built
def test_rust_native_refuses_an_unknown_block(tmp_path):
    if native.available():
        pytest.skip(native.available())
    f = tmp_path / "args.bin"
    f.write_bytes(native.block_args_file((1,), ()))
    done = subprocess.run([str(rust.NATIVE_PATH), "--block", "nope", "--args", str(f), "--plan",
                           '{"block": 1, "blocks": [[0, 1]], "lead_in": 1, "per_round": 1, "rounds": 1, '
                           '"warm_s": 0.0, "warmup": 0}'], capture_output=True, text=True)
    assert done.returncode == 1 and "no block named" in done.stderr, done.stderr


# ---- bf16 without a GPU -------------------------------------------------------------------------------
def test_bf16_is_registered_beside_fp32():
    impl, native_impl = registry.get(OP, "rust", "bf16"), registry.get(OP, "rust_native", "bf16")
    assert impl.fn is registry.get(OP, "rust").fn  # one function: the inputs' dtype picks the block
    assert "GemmEx bf16" in impl.config["gemm"] and impl.config["launches"] == rust_block.LAUNCHES
    assert native_impl.config["kernel"] == "mlp_block.bf16" and native_impl.kernels_of == "rust"
    assert register.block_name(OP, "bf16") == "mlp_block.bf16" and register.block_name(OP) == OP
    assert_refuses(register.block_name, OP, "dtype", OP, "tf32")


def test_bf16_bad_inputs_name_the_block_and_the_argument():
    x, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(T=3, d=8, hidden=4), dtype="bf16")
    assert_refuses(rust_block.mlp_block, OP, "W2", x, gamma, beta, W1, b1, W2.float(), b2)
    assert_refuses(rust_block.mlp_block, OP, "out", x, gamma, beta, W1, b1, W2, b2, out=torch.empty(3, 8))
    if not torch.cuda.is_available():
        assert_refuses(rust_block.mlp_block, OP, "x", x, gamma, beta, W1, b1, W2, b2)  # needs a CUDA device


@built
def test_bf16_library_checks_and_launches():
    name = register.block_name(OP, "bf16")
    register.block_check(name, _packed())
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT") as e:
        register.block_check(name, _packed(W1=0))
    assert "mlp_block: W1 is a null pointer" in str(e.value)  # the block named without its precision
    assert register.block_info(name, 5, 37, 19) == register.block_info(OP, 5, 37, 19)
    assert register.block_info(name, 5, 37, 19)[1] == rust_block.LAUNCHES
    with pytest.raises(rust.RustKernelError, match="no block named"):
        register.block_info("mlp_block.fp16", 1, 1, 1)


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
def test_gpu_rust_block_is_fp32_whatever_tf32_was_left_at():
    torch.backends.cuda.matmul.allow_tf32 = True  # the library's own handle uses the default math mode
    r = check(registry.get(OP, "rust"), SPEC.shapes["field"][0], trials=2, device="cuda")
    assert r.passed, r.reason


@gpu
@built
def test_gpu_launches_per_call():
    from mage.profile import profile
    impl = registry.get(OP, "rust")
    for shape in (SPEC.shapes["field"][0], dict(T=67, d=130, hidden=257)):
        inputs = SPEC.inputs(shape, seed=0, device="cuda")
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
    for k, shape in enumerate([dict(T=67, d=130, hidden=257), dict(T=1, d=5, hidden=3), SPEC.shapes["field"][0]]):
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
    inputs = SPEC.inputs(dict(T=67, d=130, hidden=257), seed=3, device="cuda", dtype="bf16")
    ref = SPEC.reference(*inputs)
    out = torch.full(inputs[0].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    assert rust_block.mlp_block(*inputs, out=out) is out
    err, tri = rel_err(out, ref), rel_err(registry.get(OP, "triton", "bf16").fn(*inputs), ref)
    print(f"\n{OP}/rust bf16: rel error {err:.2e} (triton bf16 {tri:.2e}, tolerance {SPEC.tol('bf16'):.0e})")
    # bf16 storage alone costs about 2^-9; FP32 math keeps the block near that, as the Triton block
    assert 1e-4 < err < SPEC.tol("bf16") / 2 and err < 2 * tri + 1e-3


@gpu
@built
def test_gpu_bf16_launches_per_call():
    from mage.profile import profile
    impl = registry.get(OP, "rust", "bf16")
    for shape in (SPEC.shapes["field"][0], dict(T=67, d=130, hidden=257)):
        inputs = SPEC.inputs(shape, seed=0, device="cuda", dtype="bf16")
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
    for k, shape in enumerate([dict(T=67, d=130, hidden=257), dict(T=1, d=5, hidden=3), SPEC.shapes["field"][0]]):
        inputs = SPEC.inputs(shape, seed=k, device="cuda", dtype="bf16")
        via_c = registry.get(OP, "rust", "bf16").fn(*inputs).cpu()
        via_bin = native.block_output(OP, rust_block.native_values, inputs)
        assert via_bin.dtype == torch.bfloat16
        assert rel_err(via_bin, SPEC.reference(*inputs).cpu()) < SPEC.tol("bf16")
        assert torch.equal(via_bin, via_c), float((via_bin.float() - via_c.float()).abs().max())
