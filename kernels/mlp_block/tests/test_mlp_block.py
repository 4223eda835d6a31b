"""The MLP block: its float64 reference against the operations' own references composed, every column
against the reference at awkward shapes (normal and heavy-tailed), bad input naming the block and the
argument; on a GPU, every column at 30 random shapes per precision and its launches per call."""
from __future__ import annotations

import math

import pytest
import torch

from kernels.mlp_block.tests.bad_inputs import bad_cases, good
from tests.support.kernel_checks import INTERPRET, assert_refuses, check_shapes, cpu_only, gpu, gpu_failures, rel_err, usable
from mage import facets, ops, registry, run
from mage.check import check
from mage.errors import MageInputError

OP = "mlp_block"
SPEC = ops.OPS[OP]
SMALL = dict(T=5, d=37, hidden=19)


def composed(x, gamma, beta, W1, b1, W2, b2):
    """The block from the operations' references: LayerNorm, matmul, bias + GELU, matmul, the sums."""
    O = ops.OPS
    h = O["layernorm"].reference(x, gamma, beta)
    g = O["bias_gelu"].reference(O["matmul"].reference(h, W1.double().T), b1)
    return x.double() + O["matmul"].reference(g, W2.double().T) + b2.double()


# ---- the reference ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("shape", SPEC.awkward + [dict(T=40, d=96, hidden=384)], ids=ops.shape_key)
def test_reference_is_the_composition_of_the_operation_references(shape, dist, dtype):
    inputs = SPEC.inputs(shape, seed=3, dtype=dtype, dist=dist)
    ref, comp = SPEC.reference(*inputs), composed(*inputs)
    assert ref.dtype == torch.float64 and ref.shape == inputs[0].shape
    assert torch.allclose(ref, comp, rtol=1e-12, atol=1e-12)


def test_reference_by_hand():
    # zero weights: the block is the residual plus b2; one unit of W1/W2 picks gelu of one LN column
    x, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(T=4, d=6, hidden=3), seed=1)
    zero = SPEC.reference(x, gamma, beta, torch.zeros_like(W1), b1, torch.zeros_like(W2), b2)
    assert torch.allclose(zero, x.double() + b2.double(), rtol=0, atol=0)
    W1, W2, b1 = torch.zeros_like(W1), torch.zeros_like(W2), torch.zeros_like(b1)
    W1[1, 2], W2[4, 1] = 1.0, 1.0
    xd = x.double()
    ln = (xd - xd.mean(1, keepdim=True)) / torch.sqrt(xd.var(1, unbiased=False, keepdim=True) + 1e-5)
    z = ln[:, 2] * float(gamma[2]) + float(beta[2])
    want = xd + b2.double()
    want[:, 4] += 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))
    assert torch.allclose(SPEC.reference(x, gamma, beta, W1, b1, W2, b2), want, rtol=1e-12, atol=1e-12)


def test_inputs_keep_activations_of_order_one():
    # the weights are scaled like an init (1/sqrt fan-in): the block's output is O(1), not O(sqrt d)
    y = SPEC.reference(*SPEC.inputs(dict(T=64, d=768, hidden=3072), seed=0))
    assert 0.3 < float(y.std()) < 3.0, float(y.std())


def test_the_spec_is_a_block():
    assert SPEC.kind == "block" and facets.of(OP).order >= 100 and set(SPEC.dtypes) == {"fp32", "bf16"}
    s = SPEC.shapes["field"][0]
    assert SPEC.flops(s) >= 4 * s["T"] * s["d"] * s["hidden"]
    assert SPEC.cost(s, "bf16")[1] * 2 == SPEC.cost(s, "fp32")[1]


# ---- the columns at awkward shapes -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_eager_at_awkward_shapes(dist, dtype):
    impl = registry.get(OP, "pytorch", dtype)
    check_shapes(impl, SPEC.awkward, dist, trials=2)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_triton_block_at_awkward_shapes(dist):
    impl = registry.get(OP, "triton", "fp32")
    check_shapes(impl, SPEC.awkward, dist, trials=1)


@cpu_only
def test_triton_block_takes_views_and_the_transposed_layout():
    # W1 and W2 as transposed views of [in, out] storage, x a column slice of a wider tensor, b2
    # broadcast: legal inputs, answered exactly as the contiguous ones
    from kernels.mlp_block.triton_block import mlp_block
    x, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(T=7, d=24, hidden=40), seed=2, dist="heavy")
    wide = torch.zeros(7, 48)
    wide[:, ::2] = x
    args = (wide[:, ::2], gamma, beta, W1.t().contiguous().t(), b1, W2.t().contiguous().t(), b2[:1].expand(24))
    assert rel_err(mlp_block(*args), SPEC.reference(*args)) < 5e-6


TINY_FUSED = dict(GEMM="fused", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=1)


def _fused_variant():
    return registry.get(OP, "triton", "fp32").variant(**TINY_FUSED)


@cpu_only
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_fused_road_at_awkward_shapes(dist):
    # small tiles, so a shape spans several tiles, partial ones and grouped program order (the largest
    # awkward shape is left to the GPU: 16-wide tiles make it slow in the interpreter); hidden = 0 leaves
    # the second GEMM no K steps, its epilogue alone gives x + b2
    check_shapes(_fused_variant(), SPEC.awkward[:-1] + [dict(T=20, d=45, hidden=70), dict(T=5, d=40, hidden=0)], dist, trials=1)


@cpu_only
def test_fused_road_takes_views():
    x, gamma, beta, W1, b1, W2, b2 = SPEC.inputs(dict(T=19, d=24, hidden=40), seed=2, dist="heavy")
    wide = torch.zeros(19, 48)
    wide[:, ::2] = x
    args = (wide[:, ::2], gamma, beta, W1.t().contiguous().t(), b1, W2.t().contiguous().t(), b2[:1].expand(24))
    assert rel_err(_fused_variant().fn(*args), SPEC.reference(*args)) < 5e-6


@cpu_only
def test_every_sweep_config():
    impl = registry.get(OP, "triton", "fp32")
    from kernels.mlp_block.triton_block import default_config
    assert impl.sweep[0] == {"GEMM": "cublas"}  # the baseline the fused tiles were swept against
    assert impl.config_at(SPEC.shapes["field"][0]) == default_config("fp32") and default_config("fp32")["GEMM"] == "fused"
    for cfg in impl.sweep:
        r = check(impl.variant(**cfg), SMALL, trials=1, device="cpu")
        assert r.passed, (cfg, r.reason)


def test_bad_config_is_refused():
    from kernels.mlp_block.triton_block import _config
    for bad in (dict(GEMM="cutlass"), dict(GEMM="cublas", BLOCK_M=64), dict(GEMM="fused", BLOCK_Q=1)):
        with pytest.raises(MageInputError) as e:
            _config(bad)
        assert (e.value.op, e.value.arg) == (OP, "config")


@cpu_only
def test_triton_block_writes_out_and_returns_it():
    from kernels.mlp_block.triton_block import mlp_block
    inputs = SPEC.inputs(SMALL, seed=4)
    out = torch.full(inputs[0].shape, float("nan"))
    assert mlp_block(*inputs, out=out) is out
    assert rel_err(out, SPEC.reference(*inputs)) < 5e-6


@cpu_only
def test_custom_op_runs_eagerly():
    import kernels.mlp_block.triton_block  # noqa: F401 - registers the operator
    inputs = SPEC.inputs(SMALL, seed=5)
    assert rel_err(torch.ops.mage.triton_mlp_block(*inputs), SPEC.reference(*inputs)) < 5e-6


# ---- bad input --------------------------------------------------------------------------------------
def _block_fns():
    fns = [("run", lambda *a, **k: run(OP, "pytorch", *a, **k))]
    if INTERPRET:
        from kernels.mlp_block.triton_block import mlp_block
        fns += [("triton", mlp_block), ("operator", lambda *a: torch.ops.mage.triton_mlp_block(*a))]
    return fns


@pytest.mark.parametrize("entry", [n for n, _ in _block_fns()])
def test_bad_inputs_name_the_block_and_the_argument(entry):
    fn = dict(_block_fns())[entry]
    for arg, inputs in bad_cases():
        if entry == "operator" and arg == "b2":
            continue  # a list is refused by PyTorch's dispatcher before any of our code runs
        assert_refuses(fn, OP, arg, *inputs)
    if entry != "operator":
        assert_refuses(fn, OP, "out", *good(), out=torch.empty(5, 36))


def test_errors_say_what_was_expected():
    x, gamma, beta, W1, b1, W2, b2 = good()
    with pytest.raises(MageInputError, match=r"mlp_block: argument 'W2' .*hidden, the rows of W1"):
        SPEC.validate(x, gamma, beta, W1, b1, W2[:, :-1], b2)


@cpu_only
# ---- on a GPU ---------------------------------------------------------------------------------------
def _cuda_impls():
    return [(i.name, i.dtype) for i in registry.impls(OP) if i.callable]


@gpu
@pytest.mark.parametrize("name,dtype", _cuda_impls())
def test_gpu_every_column_at_random_shapes(name, dtype):
    impl = registry.get(OP, name, dtype)
    usable(impl)  # unavailable: a failure with its reason, unless MAGE_GPU_EXCLUDE names it
    failures = gpu_failures(impl, SPEC.random_shapes(30, seed=1) + SPEC.awkward)
    assert not failures, failures[:5]


@gpu
def test_gpu_fused_road_at_random_shapes():
    # tf32x3 must hold the FP32 tolerance at every size, K up to 5000 (hidden) included
    impl = registry.get(OP, "triton", "fp32")
    for cfg in impl.sweep[1:]:
        failures = gpu_failures(impl.variant(**cfg), SPEC.random_shapes(30, seed=2) + SPEC.shapes["field"])
        assert not failures, (cfg, failures[:5])


@gpu
def test_gpu_triton_block_is_ieee_fp32_whatever_tf32_was_left_at():
    torch.backends.cuda.matmul.allow_tf32 = True  # as a TF32 row leaves it
    r = check(registry.get(OP, "triton", "fp32"), SPEC.shapes["field"][0], trials=2, device="cuda")
    assert r.passed, r.reason


# Launches per call at the field shape. The Triton block's are its own (docstring of triton_block.py);
# eager PyTorch's are a prediction (LayerNorm, Linear with its bias in cuBLAS's epilogue, GELU, Linear,
# the residual add) until the first GPU run; the compiled columns' counts are printed and held stable.
# The Triton column's count is its road's (``launches``: the default road differs by precision).
EXPECTED_LAUNCHES = {"pytorch": 5, "triton fused": 3, "triton cublas": 5}


@gpu
@pytest.mark.parametrize("name,dtype", _cuda_impls() + [("triton fused", "fp32"), ("triton cublas", "fp32")])
def test_gpu_launches_per_call_are_stable(name, dtype):
    from mage.profile import profile
    impl = registry.get(OP, name.split()[0], dtype)
    if name.startswith("triton "):
        impl = impl.variant(GEMM=name.split()[1])
    inputs = SPEC.inputs(SPEC.shapes["field"][0], seed=0, device="cuda", dtype=dtype)
    args = impl.prepare(*inputs) if impl.prepare else inputs
    counts = []
    for _ in range(2):
        p = profile(lambda: impl.fn(*args), iters=20)
        assert "launches_unstable" not in p.flags, (p.flags, p.per_iter_launches)
        counts.append(p.launches)
    print(f"\n{OP}/{name}/{dtype}: {counts[0]:g} launches per call: {p.kernel_names}")
    assert counts[0] == counts[1] and counts[0] == int(counts[0]), counts
    if name in EXPECTED_LAUNCHES:
        assert counts[0] == EXPECTED_LAUNCHES[name], (counts[0], p.kernel_names)
    if name == "triton":
        from kernels.mlp_block.triton_block import launches
        assert counts[0] == launches(impl.config_at(SPEC.shapes["field"][0])), (counts[0], p.kernel_names)


def test_the_hopper_road_is_refused_by_name_on_a_card_without_it(monkeypatch):
    """The 'hopper' road (TMA loads, warpgroup MMA) runs on sm_90 or under the interpreter; elsewhere a
    call asking for it is refused naming the config, never run on another road silently."""
    import pytest
    from kernels.matmul import triton_hopper
    from kernels.mlp_block.triton_block import mlp_block
    from mage.errors import MageInputError
    monkeypatch.setattr(triton_hopper, "available", lambda device=None: False)
    with pytest.raises(MageInputError, match="sm_90"):
        mlp_block(*SPEC.inputs(dict(T=3, d=8, hidden=16)), GEMM="hopper")
