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

from tests.support.kernel_checks import assert_refuses, gpu
from mage import ops

rust = pytest.importorskip("kernels._rust")
from kernels._rust import register  # noqa: E402
from kernels.mp_block import rust_block  # noqa: E402
from tests.support import block_rust as kit  # noqa: E402

OP = "mp_block"
SPEC = ops.OPS[OP]
built = kit.built
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
    kit.library_refuses(OP, _packed(), _packed(**change), message)


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
    kit.bf16_registered(OP, rust_block)


@built
def test_bf16_library_checks_and_launches():
    kit.bf16_library_names_the_block(OP, rust_block, _packed(), _packed(tasks=7),
                                     "mp_block: without a plan there is one task per node", (37, 33, 17))


# ---- on a GPU ---------------------------------------------------------------------------------------
@gpu
@built
def test_gpu_rust_block_at_random_shapes():
    kit.gpu_random_shapes(OP, "fp32", seed=7)


@gpu
@built
def test_gpu_launches_per_call():
    kit.gpu_launches_per_call(OP, rust_block, "fp32", SMALL)


@gpu
@built
def test_gpu_rust_native_computes_the_same_output():
    kit.gpu_native_same_output(OP, rust_block, "fp32", [SMALL, dict(n=40, F=3, H=5, deg=2), SPEC.shapes["field"][0]])


# ---- bf16 on a GPU ----------------------------------------------------------------------------------
@gpu
@built
def test_gpu_bf16_rust_block_at_random_shapes():
    kit.gpu_random_shapes(OP, "bf16", seed=17)


@gpu
@built
def test_gpu_bf16_output_is_bf16_and_near_the_triton_block():
    inputs = SPEC.inputs(SMALL, seed=3, device="cuda", dtype="bf16")
    kit.gpu_bf16_near_the_triton_block(OP, rust_block.mp_block, inputs, inputs[1])


@gpu
@built
def test_gpu_bf16_launches_per_call():
    kit.gpu_launches_per_call(OP, rust_block, "bf16", SMALL)


@gpu
@built
def test_gpu_bf16_rust_native_computes_the_same_output():
    kit.gpu_native_same_output(OP, rust_block, "bf16", [SMALL, dict(n=40, F=3, H=5, deg=2), SPEC.shapes["field"][0]])
