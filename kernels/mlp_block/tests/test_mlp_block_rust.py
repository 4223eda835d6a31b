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

from tests.support.kernel_checks import assert_refuses, gpu
from mage import ops, registry
from mage.check import check

rust = pytest.importorskip("kernels._rust")
from kernels._rust import native, register  # noqa: E402
from kernels.mlp_block import rust_block  # noqa: E402
from kernels.mlp_block.tests.bad_inputs import bad_cases, good  # noqa: E402
from tests.support import block_rust as kit  # noqa: E402

OP = "mlp_block"
SPEC = ops.OPS[OP]
built = kit.built


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
    kit.library_refuses(OP, _packed(), _packed(**change), message)


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
    kit.bf16_registered(OP, rust_block)
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
    kit.bf16_library_names_the_block(OP, rust_block, _packed(), _packed(W1=0), "mlp_block: W1 is a null pointer",
                                     (5, 37, 19))
    with pytest.raises(rust.RustKernelError, match="no block named"):
        register.block_info("mlp_block.fp16", 1, 1, 1)


# ---- on a GPU ---------------------------------------------------------------------------------------
OTHER = dict(T=67, d=130, hidden=257)


@gpu
@built
def test_gpu_rust_block_at_random_shapes():
    kit.gpu_random_shapes(OP, "fp32", seed=7)


@gpu
@built
def test_gpu_rust_block_is_fp32_whatever_tf32_was_left_at():
    torch.backends.cuda.matmul.allow_tf32 = True  # the library's own handle uses the default math mode
    r = check(registry.get(OP, "rust"), SPEC.shapes["field"][0], trials=2, device="cuda")
    assert r.passed, r.reason


@gpu
@built
def test_gpu_launches_per_call():
    kit.gpu_launches_per_call(OP, rust_block, "fp32", OTHER)


@gpu
@built
def test_gpu_rust_native_computes_the_same_output():
    kit.gpu_native_same_output(OP, rust_block, "fp32", [OTHER, dict(T=1, d=5, hidden=3), SPEC.shapes["field"][0]])


# ---- bf16 on a GPU ----------------------------------------------------------------------------------
@gpu
@built
def test_gpu_bf16_rust_block_at_random_shapes():
    kit.gpu_random_shapes(OP, "bf16", seed=17)


@gpu
@built
def test_gpu_bf16_output_is_bf16_and_near_the_triton_block():
    inputs = SPEC.inputs(OTHER, seed=3, device="cuda", dtype="bf16")
    kit.gpu_bf16_near_the_triton_block(OP, rust_block.mlp_block, inputs, inputs[0])


@gpu
@built
def test_gpu_bf16_launches_per_call():
    kit.gpu_launches_per_call(OP, rust_block, "bf16", OTHER)


@gpu
@built
def test_gpu_bf16_rust_native_computes_the_same_output():
    kit.gpu_native_same_output(OP, rust_block, "bf16", [OTHER, dict(T=1, d=5, hidden=3), SPEC.shapes["field"][0]])
