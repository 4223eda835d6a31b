"""The triangle contraction's bf16 column (bf16 storage; the products, exact in FP32, summed in FP32):
eager PyTorch and the Triton launcher (under the interpreter) against float64 on the bf16 values, the
bytes it moves, mixed precisions and a precision that does not fit the storage refused, a long sum over k
(where a bf16 sum fails), the road a GPU call takes, and on a GPU every bf16 tile config."""
from __future__ import annotations

import pytest
import torch

import mage
from kernels._triton import common
from tests.support.kernel_checks import (assert_refuses, check_bf16_columns, check_mixed_precisions_refused, gpu,
                                     gpu_failures, module, rel_err, spec, variant)
from mage import registry
from mage.ext.training.passes import grad_cost

OP = "triangle"
# the sweep default's 128 x 128 tiles over a few rows and channels (masked everywhere), and a k loop of
# two 64-deep steps, the second part-masked
SHAPES = [dict(N=5, C=3), dict(N=70, C=2)]
# the channel-major road storing runs of 4 channels straight into O, small tiles (several of them, a
# part-filled channel group)
FORCED = (dict(STORE="direct", BLOCK_I=16, BLOCK_J=16, BLOCK_K=16, BLOCK_C=4), dict(N=19, C=6))


def test_bf16_inputs_output_and_bytes():
    A, B = spec(OP).inputs(dict(N=3, C=2), dtype="bf16")
    assert A.dtype == B.dtype == spec(OP).empty_out(A, B).dtype == torch.bfloat16
    assert spec(OP).inputs(dict(N=3, C=2), dtype="fp32x3")[0].dtype == torch.float32  # FP32 storage
    assert spec(OP).cost(dict(N=5, C=3), "bf16") == (2 * 125 * 3, 2 * 3 * 25 * 3)  # A, B, O: 2 bytes each
    assert spec(OP).cost(dict(N=5, C=3), "fp32x3")[1] == 4 * 3 * 25 * 3
    assert grad_cost(spec(OP), dict(N=5, C=3), "bf16")[1] == 2 * 5 * 25 * 3


@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_bf16_columns_against_float64(dist):
    check_bf16_columns(OP, SHAPES, dist, FORCED)


def test_mixed_precisions_name_op_and_argument():
    A, B = spec(OP).inputs(dict(N=3, C=2), dtype="bf16")
    check_mixed_precisions_refused(OP, (A, B), stray=1)


def test_the_precision_must_fit_the_storage():
    A, B = spec(OP).inputs(dict(N=3, C=2), dtype="bf16")
    fn = module(OP).triangle
    for dtype in ("fp32", "fp32x3"):
        assert "does not fit precision" in str(assert_refuses(fn, OP, "A", A, B, dtype=dtype))
    assert_refuses(fn, OP, "A", A.float(), B.float(), dtype="bf16")
    # without a dtype the inputs' storage picks it, for the launcher and the operator alike
    ref = spec(OP).reference(A, B)
    for got in (fn(A, B), torch.ops.mage.triton_triangle(A, B)):
        assert got.dtype == torch.bfloat16 and rel_err(got, ref) < spec(OP).tol("bf16")
    assert not registry.impls(OP, names=["rust"], dtype="bf16")  # no Rust bf16 column


def test_eager_bf16_sums_a_long_k_in_fp32():
    # 600 products of about 1 each: a sum near 600, where bf16's spacing is 4, so a running bf16 sum
    # stops growing at 512 (512 + 1 rounds back to 512); summed in FP32, the output is rounded once
    gen = torch.Generator().manual_seed(5)
    A, B = ((1.0 + 0.01 * torch.rand(600, 600, 1, generator=gen)).bfloat16() for _ in range(2))
    ref = spec(OP).reference(A, B)
    got = mage.run(OP, "pytorch", A, B, dtype="bf16")
    assert got.dtype == torch.bfloat16 and rel_err(got, ref) < 2**-8
    one_at_a_time = torch.zeros(600, 600, 1, dtype=torch.bfloat16)
    for k in range(600):
        one_at_a_time += (A[:, k, None, :].float() * B[None, :, k, :].float()).bfloat16()
    assert rel_err(one_at_a_time, ref) > 0.1


class _Recorder:
    """Stands in for a kernel: records each launch's positional arguments and keywords."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def test_a_gpu_call_copies_bf16_operands_for_the_tensor_cores(monkeypatch):
    # as on a GPU (no interpreter): the channel-major copies, the scratch and the output stay bf16, k
    # innermost, 64 deep, products "ieee" (the tensor cores' bf16 products)
    recs = {name: _Recorder() for name in ("_transpose_kernel", "_batched_gemm_kernel")}
    for name, rec in recs.items():
        monkeypatch.setattr(module(OP).road, name, rec)
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    monkeypatch.setattr(common, "interpreting", lambda: False)
    A, B = (torch.empty(384, 384, 128, dtype=torch.bfloat16, device="meta") for _ in range(2))
    assert module(OP).triangle(A, B).dtype == torch.bfloat16
    (args, kw), = recs["_batched_gemm_kernel"].calls
    assert args[0].dtype == args[1].dtype == args[2].dtype == torch.bfloat16  # at, bt, the permute scratch
    assert kw["PRECISION"] == "ieee" and kw["K_INNER"] and kw["BLOCK_K"] == 64
    assert len(recs["_transpose_kernel"].calls) == 2  # A and B in, the scratch out


def test_every_bf16_config_is_a_tensor_core_config():
    table = module(OP).TILES["bf16"]
    assert 3 <= len(table.sweep) <= 5
    for cfg in table.configs.values():
        assert cfg["LAYOUT"] == "channel_major" and cfg["K_INNER"] and cfg["BLOCK_K"] == 64, cfg


# ---- GPU ----------------------------------------------------------------------------------------------
@gpu
def test_gpu_every_bf16_config_at_the_large_shape_and_random_shapes():
    large = spec(OP).shapes["large"][0]
    bad = []
    for cfg in module(OP).TILES["bf16"].sweep_configs():
        bad += gpu_failures(variant(OP, "bf16", **cfg), [large] + spec(OP).random_shapes(10))
    assert not bad, bad[:5]
