"""The triangle update block: its float64 reference against a composition of the operations' own
references, its inputs and cost model, eager PyTorch and the Triton block (interpreter, tiny N)
against the reference with normal and heavy-tailed inputs and masks with zero rows, bad input named
by block and argument, launches per call; on a GPU, every implementation at 30 random shapes per
precision and a stable launch count."""
from __future__ import annotations

import math

import pytest
import torch

import mage
from kernels._triton import common
from tests.support.kernel_checks import assert_refuses, check_shapes, cpu_only, gpu, rel_err, usable
from kernels.layernorm.spec import EPS
from mage import facets, ops, registry
from mage.check import check, describe_mismatch, outside

from .. import triton_block as tb
from ..spec import ARGS, NAME

SPEC = ops.get(NAME)
DTYPES = ("fp32", "bf16")
# Tiny, and multiples of nothing: the interpreter's time grows with N^2 programs and channels.
TINY = [dict(N=1, C=1, H=1), dict(N=2, C=3, H=5), dict(N=4, C=5, H=3), dict(N=6, C=7, H=9)]


def _compose(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out):
    """The update from the operations' float64 references: layernorm, matmul, triangle."""
    N, C, H = z.shape[0], z.shape[2], gamma_out.shape[0]
    ln, mm, tri = (ops.OPS[k].reference for k in ("layernorm", "matmul", "triangle"))
    p = mm(ln(z.reshape(N * N, C), gamma_in, beta_in), w_in) + b_in.double()
    gate = [torch.sigmoid(p[:, q * H:(q + 1) * H]) for q in (0, 2)]
    m = mask.double().reshape(N * N, 1)
    a, b = (g * p[:, q * H:(q + 1) * H] * m for g, q in zip(gate, (1, 3)))
    o = tri(a.reshape(N, N, H), b.reshape(N, N, H)).reshape(N * N, H)
    y = mm(ln(o, gamma_out, beta_out), w_out) + b_out.double()
    return (torch.sigmoid(p[:, 4 * H:]) * y).reshape(N, N, C)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_reference_is_the_composition_of_the_operation_references(dtype, dist):
    for shape in TINY + [dict(N=13, C=16, H=8), dict(N=7, C=128, H=128)]:
        x = SPEC.inputs(shape, seed=3, dtype=dtype, dist=dist)
        want = _compose(*x)
        assert rel_err(SPEC.reference(*x), want) < 1e-12, shape


def test_inputs_are_seeded_and_masks_have_zero_rows():
    a = SPEC.inputs(dict(N=16, C=4, H=3), seed=7)
    assert all(torch.equal(u, v) for u, v in zip(a, SPEC.inputs(dict(N=16, C=4, H=3), seed=7)))
    assert not torch.equal(a[0], SPEC.inputs(dict(N=16, C=4, H=3), seed=8)[0])
    mask = a[1]
    assert set(mask.unique().tolist()) == {0.0, 1.0}
    rows = (mask == 0).all(dim=1)
    assert rows[-2:].all() and not rows[:-2].any()  # two padded tokens of 16: zero rows and columns
    assert (mask[:-2, :-2] == 0).any()  # and holes that are not whole rows
    assert [t.dtype for t in SPEC.inputs(dict(N=3, C=2, H=2), dtype="bf16")] == [torch.bfloat16] * len(ARGS)


def test_masked_pairs_change_nothing_and_padded_rows_are_constant():
    z, mask, *w = SPEC.inputs(dict(N=6, C=5, H=4), seed=1)
    ref = SPEC.reference(z, mask, *w)
    # a masked pair's features do not reach any o_ij: changing them changes only its own output
    z2 = z.clone()
    z2[mask == 0] = 1e3
    keep = (mask != 0)[..., None].expand_as(ref)
    assert torch.allclose(SPEC.reference(z2, mask, *w)[keep], ref[keep], rtol=1e-12, atol=1e-12)
    # a padded token's row of o is zero, so its LayerNorm is beta_out: out = gate * (beta_out w_out + b_out)
    gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out = (t.double() for t in w)
    H = gamma_out.shape[0]
    z64 = z.double()
    zn = (z64 - z64.mean(-1, keepdim=True)) / torch.sqrt(z64.var(-1, unbiased=False, keepdim=True) + EPS)
    g = torch.sigmoid((zn * gamma_in + beta_in) @ w_in[:, 4 * H:] + b_in[4 * H:])
    want = g[-1] * (beta_out @ w_out + b_out)
    assert torch.allclose(ref[-1], want, rtol=1e-10, atol=1e-12)


def test_cost_model_by_hand():
    N, C, H = 3, 2, 5
    weights = 2 * C + C * (4 * H + C) + (4 * H + C) + 2 * H + H * C + C
    assert SPEC.bytes(dict(N=N, C=C, H=H)) == 4 * (2 * N * N * C + N * N + weights)
    assert SPEC.bytes(dict(N=N, C=C, H=H), 2) == 2 * (2 * N * N * C + N * N + weights)
    gemms = 2 * N * N * C * (4 * H + C) + 2 * N ** 3 * H + 2 * N * N * H * C
    assert gemms < SPEC.flops(dict(N=N, C=C, H=H)) < 2 * gemms
    assert SPEC.kind == "block" and facets.of(NAME).order >= 100


@pytest.mark.parametrize("dtype", DTYPES)
def test_eager_against_the_reference(dtype):
    impl = registry.get(NAME, "pytorch", dtype)
    for shape in SPEC.awkward + [dict(N=12, C=128, H=128)]:
        for dist in ("normal", "heavy"):
            r = check(impl, shape, trials=2, dist=dist, device="cpu")
            assert r.passed, f"{dtype} {shape} {dist}: {r.reason}"


# ---- bad input ---------------------------------------------------------------------------------------
def _bad(**change):
    x = dict(zip(ARGS, SPEC.inputs(dict(N=4, C=3, H=2))))
    x.update(change)
    return tuple(x[k] for k in ARGS)


BAD = [
    ("mask", dict(mask=torch.ones(4, 5)), "mask of the wrong shape"),
    ("mask", dict(mask=torch.ones(4, 4, 1)), "mask with a channel axis"),
    ("mask", dict(mask=torch.ones(4, 4, dtype=torch.bool)), "boolean mask"),
    ("z", dict(z=torch.ones(4, 5, 3)), "z not square over pairs"),
    ("gamma_in", dict(z=torch.ones(4, 4, 6)), "z with the wrong channel count"),
    ("beta_in", dict(beta_in=torch.ones(4)), "beta_in with the wrong channel count"),
    ("w_in", dict(w_in=torch.ones(3, 12)), "w_in not [C, 4H + C]"),
    ("w_in", dict(w_in=torch.ones(4, 11)), "w_in with the wrong fan-in"),
    ("b_in", dict(b_in=torch.ones(10)), "b_in not matching w_in"),
    ("gamma_out", dict(gamma_out=torch.ones(3)), "gamma_out for another hidden width"),
    ("w_out", dict(w_out=torch.ones(3, 3)), "w_out for another hidden width"),
    ("w_out", dict(w_out=torch.ones(2, 4)), "w_out with the wrong output channels"),
    ("b_out", dict(b_out=torch.ones(2)), "b_out with the wrong output channels"),
    ("w_out", dict(w_out=torch.ones(2, 3, dtype=torch.float64)), "a float64 weight"),
    ("b_in", dict(b_in=torch.ones(11, dtype=torch.bfloat16)), "mixed precisions"),
]


@pytest.mark.parametrize("arg,change,why", BAD, ids=[b[2] for b in BAD])
def test_bad_inputs_name_the_block_and_the_argument(arg, change, why):
    inputs = _bad(**change)
    assert_refuses(lambda *a: mage.run(NAME, "pytorch", *a), NAME, arg, *inputs)
    assert_refuses(tb.trimul_block, NAME, arg, *inputs)


def test_the_triton_block_refuses_bad_configs(monkeypatch):
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # refused before any launch
    meta = _meta(dict(N=4, C=3, H=2))
    assert "STORE" in str(assert_refuses(tb.trimul_block, NAME, "config", *meta, STORE="scatter"))
    assert "power of two" in str(assert_refuses(tb.trimul_block, NAME, "config", *meta, GATE_V=48))
    assert_refuses(tb.trimul_block, NAME, "config", *meta, BLOCK_Q=4)
    assert "GEMM" in str(assert_refuses(tb.trimul_block, NAME, "config", *meta, GEMM="cutlass"))


# ---- launches ------------------------------------------------------------------------------------------
class _Recorder:
    """Stands in for a kernel: records each launch."""

    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((self.name, grid, kwargs))
        return launch


def _launches(monkeypatch, shape, inputs=None, **config):
    from kernels.layernorm import triton_kernel as ln
    calls = []
    monkeypatch.setattr(tb, "_gate_kernel", _Recorder(calls, "gates"))
    monkeypatch.setattr(tb.proj, "_out_gate_kernel", _Recorder(calls, "output gate"))
    kmajor = tb.proj._k_major
    monkeypatch.setattr(tb.proj, "_k_major", lambda w: calls.append(("K-major copy", None, {})) or kmajor(w))
    monkeypatch.setattr(tb.proj, "gemm_epilogue", lambda A, W, bias, out, **kw: calls.append(("epilogue GEMM", None, kw))
                        or out)
    monkeypatch.setattr(tb.proj, "hopper_epilogue", lambda A, W, bias, out, **kw: calls.append(("Hopper GEMM", None, kw))
                        or out)
    monkeypatch.setattr(tb._gated_in, "_gated_in_kernel", _Recorder(calls, "gated projection"))
    monkeypatch.setattr(tb.road, "_batched_gemm_kernel", _Recorder(calls, "contraction"))
    monkeypatch.setattr(tb.tma_road, "_batched_tma_kernel", _Recorder(calls, "contraction"))
    monkeypatch.setattr(tb.road, "_transpose_kernel", _Recorder(calls, "transpose"))
    monkeypatch.setattr(ln, "_layernorm_kernel", _Recorder(calls, "layernorm"))
    monkeypatch.setattr(tb._fused, "_in_kernel", _Recorder(calls, "fused in"))
    monkeypatch.setattr(tb._fused, "_out_kernel", _Recorder(calls, "fused out"))
    bmm = tb._fused._contract
    monkeypatch.setattr(tb._fused, "_contract", lambda *a: calls.append(("contraction", None, {})) or bmm(*a))
    addmm = torch.addmm
    monkeypatch.setattr(torch, "addmm", lambda *a, **k: calls.append(("cuBLAS", None, {})) or addmm(*a, **k))
    monkeypatch.setattr(common, "on_device", lambda op, named: None)  # meta tensors: shapes only
    tb.trimul_block(*(inputs or _meta(shape)), **config)
    return calls


def _meta(s):
    """An input set of ``s`` as 'meta' tensors: shapes without memory, at any size."""
    N, C, H = s["N"], s["C"], s["H"]
    sizes = ((N, N, C), (N, N), (C,), (C,), (C, 4 * H + C), (4 * H + C,), (H,), (H,), (H, C), (C,))
    return tuple(torch.empty(size, device="meta") for size in sizes)


@pytest.mark.parametrize("store", ("permute", "direct"))
def test_launches_per_call(monkeypatch, store):
    calls = _launches(monkeypatch, dict(N=40, C=6, H=5), STORE=store, GEMM="cublas")
    names = [c[0] for c in calls]
    want = ["layernorm", "cuBLAS", "gates", "contraction"] + (["transpose"] if store == "permute" else []) + \
        ["layernorm", "cuBLAS", "output gate"]
    assert names == want
    assert len(calls) == tb.launches(dict(tb.FIRST, STORE=store, GEMM="cublas"))
    # the contraction runs on the FMA units, over every hidden channel
    gemm = next(c for c in calls if c[0] == "contraction")
    assert gemm[2]["PRECISION"] == "ieee" and gemm[1] == (1 * 1 * 5,)


@pytest.mark.parametrize("kmajor", (0, 1))
def test_launches_per_call_on_the_fused_road(monkeypatch, kmajor):
    inputs = _meta(dict(N=40, C=6, H=5))
    first = _launches(monkeypatch, None, inputs, GEMM="fused", GEMM_KMAJOR=kmajor)
    copy = ["K-major copy"] * kmajor
    assert [c[0] for c in first] == ["layernorm"] + copy + ["epilogue GEMM", "gates", "contraction", "transpose",
                                                           "layernorm"] + copy + ["epilogue GEMM"]
    # the weights' K-major copies are kept while they live unchanged: the next call makes none
    calls = _launches(monkeypatch, None, inputs, GEMM="fused", GEMM_KMAJOR=kmajor)
    names = [c[0] for c in calls]
    assert names == ["layernorm", "epilogue GEMM", "gates", "contraction", "transpose", "layernorm", "epilogue GEMM"]
    assert len(calls) == tb.launches(dict(tb.FIRST, GEMM="fused", GEMM_KMAJOR=kmajor))
    # the output gate rides in the second GEMM's epilogue: p's last C columns
    assert calls[-1][2]["gate"].shape == (40 * 40, 6) and "residual" not in calls[-1][2]
    inputs[4].add_(1)  # an update in place (a version bump) is seen: w_in is copied again, w_out is not
    assert [c[0] for c in _launches(monkeypatch, None, inputs, GEMM="fused", GEMM_KMAJOR=kmajor)] == \
        ["layernorm"] + copy + names[1:]


def test_launches_per_call_of_three_on_the_fused_road(monkeypatch):
    calls = _launches(monkeypatch, dict(N=40, C=6, H=5), **tb.TILES["bf16"]["fused_r64_h32_cublas"])
    assert [c[0] for c in calls] == ["fused in", "contraction", "fused out"] and tb.launches(tb.TILES["bf16"]["fused_r64_h32_cublas"]) == 3
    assert calls[0][1] == (common.cdiv(40 * 40, 64),)  # 64 pairs a program, complex by complex


def test_offsets_stay_32_bit_at_the_measured_shapes(monkeypatch):
    for shape_set in ("field", "large", "sweep", "af3"):
        for s in SPEC.shapes[shape_set]:
            calls = _launches(monkeypatch, s)
            assert not any(kw.get("OFFS_64") for _, _, kw in calls), s


# ---- the Triton block under the interpreter -------------------------------------------------------------
@cpu_only
@pytest.mark.parametrize("road", ("cublas", "fused"))
@pytest.mark.parametrize("dist", ("normal", "heavy"))
def test_triton_block_at_tiny_shapes(dist, road):
    impl = registry.get(NAME, "triton", "fp32").variant(GEMM=road)
    check_shapes(impl, TINY, dist, trials=1)


@cpu_only
@pytest.mark.parametrize("k_inner", (False, True))
@pytest.mark.parametrize("store", ("permute", "direct"))
def test_both_copy_orders_and_epilogues(k_inner, store):
    impl = registry.get(NAME, "triton", "fp32").variant(**dict(tb.FIRST, K_INNER=k_inner, STORE=store,
                                                                 BLOCK_I=16, BLOCK_J=16, GATE_V=4, GATE_H=2))
    r = check(impl, dict(N=7, C=5, H=3), trials=1, dist="heavy", device="cpu")
    assert r.passed, r.reason


@cpu_only
def test_every_sweep_config():
    for cfg in tb.TILES["fp32"].sweep_configs():
        r = check(registry.get(NAME, "triton", "fp32").variant(**cfg), dict(N=3, C=4, H=5), trials=1, device="cpu")
        assert r.passed, f"{cfg}: {r.reason}"


@cpu_only
def test_model_channels_at_two_tokens():
    # C = H = 128, as the models use: the gate kernel's channel tiles and LayerNorm's rows at full width
    cfg = dict(tb.FIRST, STORE="direct", BLOCK_C=8, BLOCK_I=16, BLOCK_J=16)
    r = check(registry.get(NAME, "triton", "fp32").variant(**cfg), dict(N=2, C=128, H=128), trials=1,
              device="cpu")
    assert r.passed, r.reason


@cpu_only
def test_zero_rows_strided_inputs_and_the_operator():
    z, mask, *w = SPEC.inputs(dict(N=6, C=4, H=3), seed=2, dist="heavy")
    mask = mask.clone()
    mask[1] = 0.0  # a zero row that is not a padded token (its column stays)
    mask_t = mask.t().contiguous().t()  # the same values, column-major
    z_s = torch.cat([z, z], -1)[..., ::2]  # every other channel of a wider tensor
    z_s.copy_(z)
    ref = SPEC.reference(z, mask, *w)
    for zz, mm in ((z, mask), (z_s, mask_t), (z, mask[:, :1].expand(6, 6))):
        want = SPEC.reference(zz, mm, *w)
        assert rel_err(tb.trimul_block(zz, mm, *w), want) < SPEC.tol("fp32")
    assert rel_err(torch.ops.mage.triton_trimul_block(z, mask, *w), ref) < SPEC.tol("fp32")
    out = torch.full_like(z, math.nan)
    assert tb.trimul_block(z, mask, *w, out=out) is out and rel_err(out, ref) < SPEC.tol("fp32")


@cpu_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_batch_of_complexes_is_each_complex_alone(dtype, poisoned):
    """[B, N, N, C], how the block is served: three complexes, each with its own values and mask, in one
    call, each against its own float64 reference (norm-wise and elementwise). The batch loop's road: a
    complex it skips or feeds another's projections or mask fails here (its buffers start as NaN)."""
    shape = dict(N=4, C=5, H=3)
    reqs = [SPEC.inputs(shape, seed=20 + c, dtype=dtype, dist="heavy" if c == 1 else "normal") for c in range(3)]
    weights = reqs[0][2:]
    z, mask = torch.stack([r[0] for r in reqs]), torch.stack([r[1] for r in reqs])
    out = torch.full_like(z, math.nan)
    assert tb.trimul_block(z, mask, *weights, out=out) is out
    for c, (zc, mc, *_) in enumerate(reqs):
        want = SPEC.reference(zc, mc, *weights)
        assert rel_err(out[c], want) <= SPEC.tol(dtype), (dtype, c, rel_err(out[c], want))
        assert not outside(out[c], want, dtype).any(), (dtype, c, describe_mismatch(out[c], want, dtype))


# ---- GPU ------------------------------------------------------------------------------------------------
IMPLS = [i for i in registry.impls(NAME)]


def _id(i):
    return f"{i.name}-{i.dtype}"


@gpu
@pytest.mark.parametrize("impl", IMPLS, ids=_id)
def test_gpu_random_shapes(impl):
    usable(impl)  # an unavailable library fails with its reason, or skips where MAGE_GPU_EXCLUDE names it
    shapes = SPEC.random_shapes(30) + SPEC.awkward + SPEC.shapes["field"] + SPEC.shapes["large"]
    # a library's limits (cuEquivariance: widths in multiples of 32) leave shapes out, so its random shapes are
    # also drawn at widths it takes (awkward N kept); the model's own shapes are never among those left out
    up = lambda n: -(-n // 32) * 32  # noqa: E731
    shapes += [dict(s, C=up(s["C"]), H=up(s["H"])) for s in SPEC.random_shapes(8, seed=3)] if impl.limits else []
    taken = [s for s in shapes if not impl.outside_limits(s)]
    assert SPEC.shapes["field"][0] in taken and SPEC.shapes["large"][0] in taken
    bad = [(s, d, r.reason) for s in taken for d in ("normal", "heavy")
           for r in [check(impl, s, trials=1, dist=d, device="cuda")] if not r.passed]
    assert not bad, bad[:5]


@gpu
@pytest.mark.parametrize("impl", IMPLS, ids=_id)
def test_gpu_launches_per_call_are_stable(impl):
    usable(impl)
    from mage.profile import profile
    shape = SPEC.shapes["field"][0]
    inputs = SPEC.inputs(shape, device="cuda", dtype=impl.dtype)
    args = impl.prepare(*inputs) if impl.prepare else inputs
    counts = [profile(lambda: impl.fn(*args), iters=5, warmup=2).launches for _ in range(2)]
    print(f"{impl.name}/{impl.dtype}: {counts[0]} launches a call")
    assert counts[0] == counts[1]
    if impl.name == "triton":
        assert counts[0] == tb.launches(impl.config_at(shape)), impl.config_at(shape)

