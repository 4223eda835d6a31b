"""The custom block as a CUDA graph ('triton_graphs', kernels/_triton/graphed.py): registered beside
'triton' with its own look; on the CPU (interpreter, the wrapper's CallAgain capture) bit for bit the
plain block, a second input set of one signature its own answer, bad inputs refused naming the block
and the argument before any capture; on a GPU, bit for bit the 'triton' column at a few shapes per
precision (field included), the float64 check, one graph launch a call."""
from __future__ import annotations

import pytest
import torch

from kernels._triton.graphed import CallAgain
from kernels._triton.test_graphed import check_launches, check_on_cpu, check_on_gpu, check_registration, like
from kernels._triton.testing import cpu_only, gpu
from mage import ops
from mage.errors import MageInputError

OP = "mlp_block"
SPEC = ops.OPS[OP]


def test_registered_beside_the_triton_column():
    check_registration(OP)


@cpu_only
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_graphed_block_is_the_plain_block_on_the_cpu(dtype):
    check_on_cpu(OP, dict(T=3, d=37, hidden=19), dtype)


@cpu_only
def test_an_empty_block_runs_plain():
    g = like(OP, "fp32", CallAgain())
    inputs = SPEC.inputs(dict(T=0, d=5, hidden=3), seed=0)
    assert g(*inputs).numel() == 0 and g.capture.captures == 0


@pytest.mark.parametrize("real", [False, True], ids=["spec", "device"])
def test_bad_inputs_are_refused_before_any_capture(real):
    g = like(OP, "fp32", None if real else CallAgain())
    inputs = SPEC.inputs(dict(T=3, d=37, hidden=19), seed=0)
    with pytest.raises(MageInputError) as e:
        g(*(lambda a: (a[0], a[1], a[2], a[3][:, :-1]) + tuple(a[4:]))(inputs))
    # the real capture refuses the CPU device first (the first argument); the spec names the bad one
    assert e.value.op == OP and e.value.arg == (SPEC.args[0] if real else "W1"), str(e.value)
    assert not g.cache and g.captures == 0


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_graphed_equals_the_triton_column_bit_for_bit(dtype):
    check_on_gpu(OP, dtype, SPEC.shapes["field"] + [dict(T=1, d=768, hidden=3072), dict(T=77, d=129, hidden=515)])


@gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_one_graph_launch_a_call(dtype):
    check_launches(OP, dtype, SPEC.shapes["field"][0])
