"""The V-JEPA 2 encoder with our kernels swapped in computes the stock encoder's function: checked on the
CPU (Triton's interpreter) at a small configuration of the same structure, against the stock model in
FP32 and in float64. The GPU test runs the published size."""
import copy

import pytest
import torch

pytest.importorskip("transformers")

from mage.errors import MageInputError  # noqa: E402
from mage.ext.models import swap as S  # noqa: E402
from mage.ext.models import vjepa2  # noqa: E402

needs_kernels = pytest.mark.skipif(
    not (torch.cuda.is_available() or __import__("os").environ.get("TRITON_INTERPRET") == "1"),
    reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


def _models():
    stock = vjepa2.build(vjepa2.TINY, seed=3)
    swapped = copy.deepcopy(stock)
    return stock, swapped, vjepa2.swap(swapped)


def test_the_swap_replaces_every_layernorm_and_linear_of_the_encoder():
    _, swapped, done = _models()
    layers = vjepa2.TINY["num_hidden_layers"] + vjepa2.TINY["pred_num_hidden_layers"]
    assert done.replaced["rotary embedding"] == layers  # every attention, encoder and predictor
    assert done.replaced["Linear + GELU"] == layers  # one MLP a layer, encoder and predictor
    # per layer: query, key, value, proj and fc2; plus the predictor's embedding and output projections
    assert done.replaced["Linear"] == 5 * layers + 2
    assert done.replaced["LayerNorm"] == 2 * layers + 2  # two a layer, and each stack's final norm
    assert not any(isinstance(m, (torch.nn.LayerNorm, torch.nn.Linear)) for m in swapped.modules())
    assert not done.kept


@needs_kernels
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_swapped_encoder_matches_the_stock_one_and_float64(dist):
    stock, swapped, _ = _models()
    video = vjepa2.clip(stock, frames=4, batch=2, seed=7)
    if dist == "heavy":  # heavy-tailed pixels: a few values far out, as an unnormalised clip would have
        video = video * torch.distributions.StudentT(2.0).sample(video.shape).abs().clamp(max=50)
    reference = vjepa2.encode(copy.deepcopy(stock).double(), video.double())
    want = vjepa2.encode(stock, video)
    got = vjepa2.encode(swapped, video)
    assert got.shape == want.shape == (2, vjepa2.tokens(stock, 4), vjepa2.TINY["hidden_size"])
    assert torch.isfinite(got).all()
    scale = reference.abs().max()
    # FP32-class: the swapped encoder errs no more than a few times the stock FP32 one, against float64
    err_got = (got.double() - reference).abs().max() / scale
    err_want = (want.double() - reference).abs().max() / scale
    assert err_got <= max(4 * err_want, 1e-6), (err_got, err_want)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * scale.item())


def test_a_tanh_gelu_is_kept_not_swapped():
    mlp = torch.nn.Module()
    mlp.fc1, mlp.act, mlp.fc2 = torch.nn.Linear(8, 16), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(16, 8)
    done = S.swap(mlp)
    assert isinstance(mlp.act, torch.nn.GELU) and isinstance(mlp.fc1, S.KernelLinear) and not mlp.fc1.gelu
    assert sum(n for k, n in done.kept.items() if "not the exact GELU" in k) == 1


def test_a_gated_mlp_is_kept_whole():
    """GEGLU: fc1 makes twice fc2's input and one half gates the other; fusing GELU into fc1 would apply
    it to both halves."""
    mlp = torch.nn.Module()
    mlp.fc1, mlp.act, mlp.fc2 = torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(16, 8)
    done = S.swap(mlp)
    assert isinstance(mlp.act, torch.nn.GELU) and not mlp.fc1.gelu
    assert sum(n for k, n in done.kept.items() if "gated MLP" in k) == 1


@needs_kernels
def test_a_swapped_linear_refuses_to_record_autograd():
    lin = torch.nn.Linear(4, 4)
    S.swap(m := torch.nn.Sequential(lin))
    with pytest.raises(MageInputError, match="swap.*model.*no backward"):
        m(torch.randn(2, 4))
    with torch.no_grad():
        assert m(torch.randn(2, 4)).shape == (2, 4)


def test_modules_the_kernels_cannot_compute_are_kept():
    m = torch.nn.Sequential(torch.nn.LayerNorm((4, 8)), torch.nn.LayerNorm(8, elementwise_affine=False),
                            torch.nn.Linear(8, 8, bias=False))
    done = S.swap(m)
    assert [type(c) for c in m] == [torch.nn.LayerNorm, torch.nn.LayerNorm, torch.nn.Linear]
    assert sum(done.kept.values()) == 3 and not done.replaced


def test_bad_models_are_refused_by_name():
    with pytest.raises(MageInputError, match="swap.*model"):
        S.swap("not a model")
    with pytest.raises(MageInputError, match="swap.*float64"):
        S.swap(torch.nn.Linear(4, 4).double())
    stock = vjepa2.build(vjepa2.TINY)
    with pytest.raises(MageInputError, match="vjepa2.*frames"):
        vjepa2.clip(stock, frames=3)


@needs_kernels
def test_the_linear_operator_refuses_bad_arguments_by_name():
    S._ops()
    x, W, b = torch.randn(4, 8), torch.randn(16, 8), torch.randn(16)
    with pytest.raises(MageInputError, match="linear.*W"):
        torch.ops.mage.triton_linear(x, torch.randn(16, 7), b, False)
    with pytest.raises(MageInputError, match="linear.*b"):
        torch.ops.mage.triton_linear(x, W, torch.randn(15), False)
    with pytest.raises(MageInputError, match="linear.*W"):
        torch.ops.mage.triton_linear(x, W.bfloat16(), b, False)
    with pytest.raises(MageInputError, match="linear.*x"):
        torch.ops.mage.triton_linear(x.double(), W, b, False)


@needs_kernels
def test_a_swapped_forward_does_not_rediscover_the_operators(monkeypatch):
    # discovery scans every operation folder: run on each call it cost the swapped V-JEPA 2 encoder about
    # 0.4 s of host time a forward on the GPU (its event span 5.5x the stock one's)
    stock, swapped, _ = _models()
    video = vjepa2.clip(stock, frames=4)
    vjepa2.encode(swapped, video)
    calls = []
    monkeypatch.setattr("mage.registry.load", lambda: calls.append(1))
    vjepa2.encode(swapped, video)
    assert not calls


def test_at_bf16_the_swap_leaves_the_linears_to_cublas_and_says_so():
    """Unset, ``linear`` and ``mlp`` follow the precision: at bf16 (where cuBLAS's GEMMs beat ours, in the
    MLP block's sweep and inside V-JEPA 2) only the LayerNorms are swapped and every Linear is counted as
    kept; asked for explicitly, the Linears are swapped at bf16 too."""
    stock = vjepa2.build(vjepa2.TINY, seed=3).to(torch.bfloat16)
    layers = vjepa2.TINY["num_hidden_layers"] + vjepa2.TINY["pred_num_hidden_layers"]
    m = copy.deepcopy(stock)
    done = S.swap(m)
    assert done.replaced == {"LayerNorm": 2 * layers + 2}
    assert done.kept["Linear (cuBLAS is faster at bf16)"] == 6 * layers + 2
    assert sum(isinstance(x, torch.nn.Linear) for x in m.modules()) == 6 * layers + 2
    assert "kept" in str(done) and "cuBLAS is faster at bf16" in str(done)  # what a run records
    forced = S.swap(copy.deepcopy(stock), linear=True, mlp=True)
    assert forced.replaced["Linear + GELU"] == layers and not forced.kept


def test_amdahl_counts_the_gelu_as_removed_only_where_the_swap_fused_it():
    """The prediction subtracts the stock GELU's time only when fc1 and its GELU became one call: at bf16
    the MLPs stay as they were, and counting their GELU as gone would predict a gain that cannot happen."""
    from mage.ext.models import parts
    fp32, bf16 = (S.swap(vjepa2.build(vjepa2.TINY, seed=3).to(dt)) for dt in (torch.float32, torch.bfloat16))
    assert parts.fused_kinds(fp32) == ("gelu",) and parts.fused_kinds(bf16) == ()
