"""The model measurement's pieces that run without a GPU (what a kernel's name says it does, which calls a
forward makes), and on a GPU the whole run at the small configuration, its rows read back by the loader."""
import pytest
import torch

pytest.importorskip("transformers")

from mage import data  # noqa: E402
from mage.ext.models import parts as P  # noqa: E402
from mage.ext.models import swap as S  # noqa: E402
from mage.ext.models import run as R  # noqa: E402
from mage.ext.models import vjepa2  # noqa: E402

needs_kernels = pytest.mark.skipif(
    not (__import__("torch").cuda.is_available() or __import__("os").environ.get("TRITON_INTERPRET") == "1"),
    reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


@pytest.mark.parametrize("name, kind", [
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("_gemm_epilogue_kernel", "gemm"),
    ("void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true>", "aggregation"),
    ("_neighbor_agg_kernel", "aggregation"),
    ("_permuted_rows_kernel", "aggregation"),  # the sum of messages' backward
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "layernorm"),
    ("_layernorm_kernel", "layernorm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "gelu"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sin_kernel_cuda>", "elementwise"),
])
def test_kernel_names_sort_into_kinds_of_work(name, kind):
    assert R.kind_of(name) == kind


@needs_kernels
def test_the_calls_a_forward_makes_are_counted_at_their_shapes():
    model = vjepa2.build(vjepa2.TINY)
    vjepa2.swap(model)
    counts = P.calls_made(model, vjepa2.clip(model, frames=4))
    T, W, L = vjepa2.tokens(model, 4), vjepa2.TINY["hidden_size"], vjepa2.TINY["num_hidden_layers"]
    assert counts[("linear", (T, W), (W, W), 0.0)] == 4 * L  # query, key, value, output projection
    assert counts[("linear_gelu", (T, W), (4 * W, W), 0.0)] == L  # fc1 with its GELU fused
    assert counts[("linear", (T, 4 * W), (W, 4 * W), 0.0)] == L
    assert counts[("layernorm", (T, W), (W,), 1e-6)] == 2 * L + 1
    heads = vjepa2.TINY["num_attention_heads"]
    seg = 2 * ((W // heads // 3) // 2)  # channels an axis, as the model sets them
    assert counts[("rope", (1, heads, T, W // heads), (32 // 16, seg), 0.0)] == 2 * L  # queries and keys
    assert sum(counts.values()) == 6 * L + 2 * L + 1 + 2 * L  # the encoder only: the predictor is skipped


@needs_kernels
@pytest.mark.parametrize("kind", ["linear", "linear_gelu", "layernorm"])
def test_the_calls_amdahl_times_run_alone_and_agree(kind):
    # the swapped Linear refuses autograd: timed alone outside inference mode, it raised (the GPU run died)
    w = (48, 32) if kind != "layernorm" else (32,)
    torch.manual_seed(0)
    ours = P._call(kind, (20, 32), w, 1e-6, torch.float32, True, device="cpu")
    torch.manual_seed(0)
    stock = P._call(kind, (20, 32), w, 1e-6, torch.float32, False, device="cpu")
    want = stock()
    if kind == "linear_gelu":  # stock is the Linear alone; its GELU is taken from the model's profile
        want = torch.nn.functional.gelu(want)
    torch.testing.assert_close(ours(), want, rtol=1e-4, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("stock_sum", ["index_add", "mace"])
def test_the_sums_amdahl_times_agree_forward_and_backward(stock_sum):
    """The molecular models' replaced call, ours and stock (PyTorch's index_add for SchNet, the package's
    scatter for MACE), at receivers grouped as the models' graphs keep them."""
    if stock_sum == "mace":
        pytest.importorskip("mace.tools.scatter")
    index = torch.sort(torch.randint(0, 9, (50,), generator=torch.Generator().manual_seed(0))).values
    got = []
    for ours in (True, False):
        torch.manual_seed(1)  # the same messages and output gradient for both
        got.append(P._sum_call(index, 9, 5, ours, P._mace_scatter if stock_sum == "mace" else None, device="cpu")())
    torch.testing.assert_close(got[0], got[1])


@pytest.mark.gpu
def test_the_run_records_rows_the_loader_reads(tmp_path):
    assert R.main(["--out", str(tmp_path), "--small", "--frames", "4", "--atoms", "200", "--mace-atoms", "200",
                   "--iters", "3", "--spans", "3"]) == 0
    rows = data.load(tmp_path / "models")
    assert set(rows.impl) == {"stock", "stock_compile", "swapped", "swapped_compile", "accelerated"}
    assert set(rows[rows.impl == "accelerated"].op) == {"mace"}  # MACE's own cuEquivariance road
    assert set(rows.view) >= {"kernel_time", "launches", "event_span", "kernel_part"}
    checks = data.load_checks(tmp_path / "models")
    assert checks.passed.all(), checks


def test_each_column_is_saved_before_the_next_one_runs(monkeypatch):
    """A call cut by its time limit while a compiled model builds keeps the columns already measured."""
    from types import SimpleNamespace as NS
    fake = NS(kernel_us=10.0, launches=3, kernel_us_by_name={"_layernorm_kernel": 10.0})
    monkeypatch.setattr(R, "profile", lambda fn, iters: fake)
    monkeypatch.setattr(R, "spans", lambda live, **k: NS(round_means=lambda name: [1.0, 2.0, 3.0]))
    saved = []

    def cut():
        assert any(r["impl"] == "stock" and r["view"] == "kernel_time" for r in saved[-1][0]), saved
        raise KeyboardInterrupt  # the time limit, while the second column compiles

    ref = torch.ones(3, dtype=torch.float64)
    case = P.Case("m", "n=1", "fp32", {"stock": lambda: ref.float(), "stock_compile": cut}, lambda: ref, [])
    with pytest.raises(KeyboardInterrupt):
        R.measure(case, 1, 1, lambda s: None, save=lambda rows, checks: saved.append((list(rows), list(checks))))
    assert [c["impl"] for c in saved[-1][1]] == ["stock"] and saved[-1][1][0]["passed"]


def test_the_packages_road_runs_before_any_model_compiles():
    """A MACE run cut while its swapped model compiled lost the package's own road, which ran last."""
    from mage.ext.models import parts as P
    cols = {"stock": 1, "swapped": 2, "stock_compile": 3, "swapped_compile": 4}
    assert list(P.with_eager(cols, "accelerated", 5)) == ["stock", "swapped", "accelerated", "stock_compile",
                                                        "swapped_compile"]
