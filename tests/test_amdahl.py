"""The Amdahl attribution on the CPU: kernel names on real-looking names, known shares and speedups
giving known predictions, the tidy rows, their loading, and the command's refusals."""
import math

import pandas as pd
import pytest

from mage.ext.amdahl import attribution as amdahl, text as amdahl_text
from mage import facets, ops
from mage.__main__ import main
from mage.data import merge_csv
from mage.ext.amdahl.parts import Part
from tests.support.synthetic import EAGER_MLP  # the shared fake profile (tests/support/synthetic.py)

MLP, TRIMUL, MP = (ops.OPS[n] for n in ("mlp_block", "trimul_block", "mp_block"))
MLP_PARTS = facets.get(MLP, "parts")


@pytest.mark.parametrize("name, part", [
    ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_cublas", "matmul"),
    ("ampere_sgemm_64x32_sliced1x4_nn", "matmul"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>", "matmul"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float>", "matmul"),
    ("_gemm_epilogue_kernel", "matmul"),  # the project's fused GEMM: its GELU rides in the epilogue
    ("vectorized_layer_norm_kernel", "layernorm"),
    ("_layernorm_kernel", "layernorm"),
    ("triton_per_fused_native_layer_norm_0", "layernorm"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>", "layernorm"),
    ("_bias_gelu_kernel", "bias_gelu"),
    ("triton_poi_fused_addmm_gelu_1", "bias_gelu"),
    ("triton_poi_fused_add_2", "elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
     "at::native::CUDAFunctor_add<float> >", "elementwise"),
    ("some_unknown_kernel", "other"),
])
def test_mlp_kernel_names_map_to_operations(name, part):
    assert amdahl.classify(name, MLP_PARTS) == part


@pytest.mark.parametrize("spec, name, part", [
    (TRIMUL, "_gate_kernel", "gate"),
    (TRIMUL, "_out_gate_kernel", "gate"),
    (TRIMUL, "void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda(...)>", "gate"),
    (TRIMUL, "_batched_gemm_kernel", "triangle"),  # the project's: not a library GEMM although it says gemm
    (TRIMUL, "_transpose_kernel", "triangle"),
    (TRIMUL, "void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda(...)>", "triangle"),
    (TRIMUL, "sm90_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x64x8_cublas", "matmul"),
    (MP, "_neighbor_agg_kernel", "neighbor_agg"),
    (MP, "void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true>", "neighbor_agg"),
    (MP, "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>",
     "neighbor_agg"),
    (MP, "triton_poi_fused_index_add_mul_0", "neighbor_agg"),
    (MP, "_layernorm_kernel", "layernorm"),
    (MP, "ampere_sgemm_128x128_tn", "matmul"),
])
def test_block_kernel_names_map_to_operations(spec, name, part):
    assert amdahl.classify(name, facets.get(spec, "parts")) == part


def test_every_part_names_an_operation_or_is_unmeasured():
    for spec in (MLP, TRIMUL, MP):
        for part in facets.get(spec, "parts"):
            if part.shapes is not None:
                assert part.op in ops.OPS, part.op
                for s in part.shapes(spec.shapes["field"][0]):
                    assert set(s) == set(ops.OPS[part.op].shapes["field"][0]), (spec.name, part.op, s)


def test_known_shares_and_speedups_give_the_known_prediction():
    # a fifth of the time made twice as fast: 1 / (0.8 + 0.1) = 1.111
    assert amdahl.predict({"a": 0.2}, {"a": 2.0}) == pytest.approx(1 / 0.9)
    assert amdahl.predict({"a": 0.5, "b": 0.25}, {"a": 2.0, "b": 0.5}) == pytest.approx(1 / (0.25 + 0.25 + 0.5))
    assert amdahl.predict({"a": 0.3, "b": 0.7}, {"a": math.nan, "b": 1.0}) == pytest.approx(1.0)  # unmeasured: s=1
    with pytest.raises(amdahl.AmdahlError):
        amdahl.predict({"a": 0.8, "b": 0.4}, {})
    with pytest.raises(amdahl.AmdahlError):
        amdahl.predict({"a": 0.5}, {"a": 0.0})


def test_attribution_and_split():
    parts = (Part("tri", (r"_mine",), split_from="mm"), Part("mm", (r"gemm",)))
    got = amdahl.attribute({"sgemm_a": 30.0, "_mine_copy": 2.0, "x": 1.0}, parts, {"tri": 1 / 3})
    assert got == pytest.approx({"tri": 12.0, "mm": 20.0, "other": 1.0})
    assert amdahl.split_fraction(10.0, 20.0) == pytest.approx(1 / 3)
    with pytest.raises(amdahl.AmdahlError):
        amdahl.attribute({"gemm": 1.0}, parts, {"mm": 0.5})  # mm shares with nobody


def _rows(run="r1", custom_scale=1.0):
    """The MLP block with eager's profile above, a custom column where LayerNorm and GELU take half the
    time, and the operations alone: LN 2x, GELU 4x faster, the GEMMs cuBLAS in both (the block at bf16,
    where its default road keeps cuBLAS's GEMMs)."""
    custom = {k: v * (0.5 if ("layer_norm" in k or "Gelu" in k) else 1.0) * custom_scale for k, v in EAGER_MLP.items()}
    op_us = {("layernorm", "pytorch"): 8.0, ("layernorm", "triton"): 4.0,
             ("bias_gelu", "pytorch"): 16.0, ("bias_gelu", "triton"): 4.0, ("matmul", "pytorch"): 60.0}
    return amdahl.rows_for_case("mlp_block", "bf16", "T=2048,d=768,hidden=3072", "field", run, MLP_PARTS,
                                "pytorch", "triton", {"pytorch": EAGER_MLP, "triton": custom}, op_us)


def test_rows_give_shares_speedups_and_both_speedups():
    t = amdahl.table(pd.DataFrame(_rows()))
    assert len(t) == 1
    r = t.iloc[0]
    # eager: 100 us; LN 0.10, GELU 0.20, GEMMs 0.65, the residual 0.05
    # inside: eager's time in the part over the custom column's (LN and GELU halved)
    assert r.parts["layernorm"] == pytest.approx(dict(p=0.10, s=2.0, inside=2.0))
    assert r.parts["bias_gelu"] == pytest.approx(dict(p=0.20, s=4.0, inside=2.0))
    assert r.parts["matmul"] == pytest.approx(dict(p=0.65, s=1.0, inside=1.0))
    assert math.isnan(r.parts["elementwise"]["s"])
    assert r.predicted == pytest.approx(1 / (0.70 + 0.10 / 2 + 0.20 / 4))
    assert r.measured == pytest.approx(100 / 85)  # LN and GELU halved in the custom column
    assert r.difference == pytest.approx(r.measured / r.predicted - 1)
    assert r.within  # -5.9%: inside the 10%
    assert r.baseline_us == pytest.approx(100.0) and r.custom_us == pytest.approx(85.0)
    assert "not_measured:assumed_1" in r.notes and "same_impl" in r.notes


def test_a_miss_is_located_in_the_part_whose_speedup_alone_misleads():
    """GELU 16x faster alone but only 2x inside the block: the prediction misses by more than the
    target, and putting that one part's in-block speedup in its place brings it back within."""
    custom = {k: v * (0.5 if ("layer_norm" in k or "Gelu" in k) else 1.0) for k, v in EAGER_MLP.items()}
    op_us = {("layernorm", "pytorch"): 8.0, ("layernorm", "triton"): 4.0,
             ("bias_gelu", "pytorch"): 16.0, ("bias_gelu", "triton"): 1.0, ("matmul", "pytorch"): 60.0}
    rows = amdahl.rows_for_case("mlp_block", "bf16", "T=2048,d=768,hidden=3072", "field", "r1", MLP_PARTS,
                                "pytorch", "triton", {"pytorch": EAGER_MLP, "triton": custom}, op_us)
    r = next(amdahl.table(pd.DataFrame(rows)).itertuples())
    assert r.predicted == pytest.approx(1 / (0.70 + 0.10 / 2 + 0.20 / 16)) and not r.within
    assert r.parts["bias_gelu"]["inside"] == pytest.approx(2.0)
    part, left = amdahl_text.locate(r)
    assert part == "bias_gelu" and left == pytest.approx(0.0, abs=1e-12)  # the other parts' s held already
    text = amdahl_text.located(amdahl.table(pd.DataFrame(rows)))
    assert "bias + GELU is 16.00x alone but 2.00x inside the block" in text
    assert text.endswith("falls from -10% to +0%.")
    assert amdahl_text.located(amdahl.table(pd.DataFrame(_rows()))) == ""  # within the target: nothing to locate


def test_rows_load_from_a_data_folder_latest_run_per_case(tmp_path):
    merge_csv(pd.DataFrame(_rows("20261201T000000Z-x")), tmp_path / amdahl.FILE, amdahl.KEY)
    merge_csv(pd.DataFrame(_rows("20261202T000000Z-x", custom_scale=0.5)), tmp_path / amdahl.FILE, amdahl.KEY)
    df = amdahl.load(tmp_path)
    assert set(df["run"]) == {"20261202T000000Z-x"}
    assert amdahl.table(df).iloc[0].measured == pytest.approx(100 / 42.5)
    assert len(amdahl.load(tmp_path, run="all")) == 2 * len(_rows())
    assert amdahl.load(tmp_path / "nothing").empty
    assert "measured" in amdahl_text.summary(amdahl.table(df))


def test_a_missing_custom_column_still_predicts():
    op_us = {("layernorm", "pytorch"): 8.0, ("layernorm", "triton"): 4.0, ("bias_gelu", "pytorch"): 1.0,
             ("bias_gelu", "triton"): 1.0}
    rows = amdahl.rows_for_case("mlp_block", "bf16", "T=1", "field", "r", MLP_PARTS, "pytorch", "triton",
                                {"pytorch": EAGER_MLP}, op_us)
    r = amdahl.table(pd.DataFrame(rows)).iloc[0]
    assert math.isnan(r.measured) and r.within is None and r.predicted == pytest.approx(1 / (0.90 + 0.10 / 2))


def test_an_unmeasured_operation_leaves_the_case_unpredicted():
    op_us = {("layernorm", "pytorch"): 8.0, ("layernorm", "triton"): 4.0}  # bias + GELU has no column here
    rows = amdahl.rows_for_case("mlp_block", "bf16", "T=1", "field", "r", MLP_PARTS, "pytorch", "triton",
                                {"pytorch": EAGER_MLP, "triton": EAGER_MLP}, op_us)
    r = amdahl.table(pd.DataFrame(rows)).iloc[0]
    assert math.isnan(r.predicted) and r.measured == pytest.approx(1.0) and r.within is None
    assert "unpredicted:bias_gelu" in r.notes


def test_the_command_refuses_what_is_not_a_block(capsys):
    assert main(["amdahl", "--out", "/nonexistent/x", "--ops", "layernorm"]) == 2
    assert "--ops" in capsys.readouterr().err
    assert main(["amdahl", "--out", "/nonexistent/x", "--custom", "no_such_impl"]) == 2


def test_the_profile_keeps_time_per_kernel_name():
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    from mage.profile import ITER, summarize_events

    def ev(name, start, end, device=DeviceType.CUDA):
        return NS(name=name, device_type=device, time_range=NS(start=start, end=end))
    events = []
    for i in range(2):  # two calls: a 3 us GEMM and a 1 us LayerNorm each
        t = 100 * i
        events += [ev(ITER, t, t + 50, DeviceType.CPU), ev("cudaLaunchKernel", t + 1, t + 2, DeviceType.CPU),
                   ev("cudaLaunchKernel", t + 3, t + 4, DeviceType.CPU),
                   ev("ampere_sgemm_128x64_tn", t + 1000, t + 1003), ev("_layernorm_kernel", t + 1010, t + 1011)]
    p = summarize_events(events, iters=2)
    assert p.kernel_us_by_name == pytest.approx({"ampere_sgemm_128x64_tn": 3.0, "_layernorm_kernel": 1.0})
    assert sum(p.kernel_us_by_name.values()) == pytest.approx(p.kernel_us)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_gpu_half_wires_operations_and_the_split(monkeypatch, dtype):
    """measure_case with the profiles made up: the triangle's einsum runs as a cuBLAS GEMM in eager, so
    its share of the eager block's GEMM time comes from the operations' own GEMM times. In bf16 too: every
    operation the block calls has its columns at bf16 (the triangle's since its bf16 column), so the case
    is predicted."""
    from mage.ext.amdahl import gpu as amdahl_gpu

    def fake(im, shape, iters, log):
        if im is None:
            return None
        if im.op == TRIMUL.name:
            gemm = {"ampere_sgemm_128x64_tn": 40.0}
            return {**gemm, "_layernorm_kernel": 10.0} if im.name == "triton" else {
                **gemm, "vectorized_layer_norm_kernel": 20.0, "direct_copy_kernel_cuda": 5.0}
        if im.op == "triangle":
            return {"ampere_sgemm_32x32_nn": 10.0, "direct_copy_kernel": 2.0} if im.name == "pytorch" else {"_k": 4.0}
        if im.op == "matmul":
            return {"sm90_xmma_gemm_cublas": 15.0}  # two calls: 30 us in all
        return {"some_kernel": 2.0 if im.name == "pytorch" else 1.0}

    monkeypatch.setattr(amdahl_gpu, "profile_at", fake)
    rows = amdahl_gpu.measure_case(TRIMUL, TRIMUL.shapes["field"][0], "field", dtype, "r", "pytorch", "triton", 5,
                                   print)
    t = amdahl.table(pd.DataFrame(rows))
    r = t.iloc[0]
    # the eager GEMM time (40) shared: the triangle's own GEMM time 10 against the projections' 30
    assert r.parts["triangle"]["p"] == pytest.approx((10 + 5) / 65)
    assert r.parts["matmul"]["p"] == pytest.approx(30 / 65)
    assert r.parts["triangle"]["s"] == pytest.approx(12 / 4) and r.parts["layernorm"]["s"] == pytest.approx(2.0)
    assert "split:triangle<-matmul" in r.notes and r.measured == pytest.approx(65 / 50)
    assert "unpredicted" not in r.notes and r.predicted > 0


def test_the_gather_of_eager_aggregation_is_the_aggregation():
    # the eager message-passing layer's gather kernel, as the H200 profile named it, left unclaimed before
    name = "void at::native::vectorized_gather_kernel<16, int>(char*, char*, int*, int, long, long, long, long, bool)"
    assert amdahl.classify(name, facets.get("mp_block", "parts")) == "neighbor_agg"


def test_a_part_names_its_custom_column_per_precision():
    """The blocks' FP32 GEMMs are the project's tf32x3 GEMM, their bf16 GEMMs cuBLAS's (MLP, triangle
    update) or the project's (message passing): the matmul part's speedup is measured against the column
    that runs, at its precision, and is one by construction only where the custom block runs the
    library's own kernel."""
    from mage.ext.amdahl.parts import Part
    p = Part("matmul", (r"gemm",), lambda s: [s], custom={"fp32": "triton@fp32x3", "bf16": "pytorch"})
    assert p.column("fp32", "triton") == ("triton", "fp32x3") and p.column("bf16", "triton") == ("pytorch", "bf16")
    assert Part("layernorm", (r"norm",)).column("bf16", "triton") == ("triton", "bf16")
    rows = amdahl.rows_for_case("b", "fp32", "s", "field", "r", [p], "pytorch", "triton",
                                {"pytorch": {"gemm_a": 30.0}, "triton": {"gemm_b": 20.0}},
                                {("matmul", "pytorch"): 30.0, ("matmul", "triton"): 18.0})
    s = next(r for r in rows if r["quantity"] == "speedup")
    assert s["value"] == pytest.approx(30 / 18) and s["flags"] == "at:fp32x3"
    rows = amdahl.rows_for_case("b", "bf16", "s", "field", "r", [p], "pytorch", "triton",
                                {"pytorch": {"gemm_a": 30.0}, "triton": {"gemm_b": 20.0}}, {})
    s = next(r for r in rows if r["quantity"] == "speedup")
    assert s["value"] == 1.0 and s["flags"] == "same_impl"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_tiles_a_block_passes_make_a_variant_of_the_column_timed_alone(dtype):
    """Where a part names the tiles its custom block passes (the LayerNorm's rows a program, the fused
    GEMMs' tiles), the operation alone is timed with them: each must build a variant of that column."""
    from mage import ops, registry
    registry.load()
    seen = 0
    for name, spec in ops.OPS.items():
        for part in facets.get(spec, "parts", ()):
            tiles = part.tiles(dtype) if part.tiles else None
            if not tiles:
                continue
            impl, at = part.column(dtype, "triton")
            v = registry.get(part.op, impl, at).variant(**tiles)
            assert all(v.config[k] == val for k, val in tiles.items()), (name, part.op, v.config)
            seen += 1
    assert seen >= (4 if dtype == "fp32" else 3)  # LN in two blocks at both; the FP32 GEMMs of three


def test_a_part_fused_away_is_located_with_no_time_inside():
    """The custom column has no kernel of its own for the residual add (fused into a GEMM's epilogue): its
    in-block speedup is infinite, the prediction (which charges it at s = 1) falls short, and with that
    part at no time the prediction is the measurement."""
    add = next(k for k in EAGER_MLP if "CUDAFunctor_add" in k)
    eager = {**EAGER_MLP, add: 30.0}  # 24% of eager's 125 us, so the miss is outside the target
    custom = {k: v for k, v in EAGER_MLP.items() if k != add}
    op_us = {("layernorm", "pytorch"): 8.0, ("layernorm", "triton"): 8.0,
             ("bias_gelu", "pytorch"): 16.0, ("bias_gelu", "triton"): 16.0}
    rows = amdahl.rows_for_case("mlp_block", "bf16", "T=2048,d=768,hidden=3072", "field", "r1", MLP_PARTS,
                                "pytorch", "triton", {"pytorch": eager, "triton": custom}, op_us)
    t = amdahl.table(pd.DataFrame(rows))
    r = next(t.itertuples())
    assert r.parts["elementwise"]["inside"] == math.inf and r.measured == pytest.approx(125 / 95)
    part, left = amdahl_text.locate(r)
    assert part == "elementwise" and left == pytest.approx(0.0, abs=1e-12)
    assert "has no kernel of its own inside the block" in amdahl_text.located(t) and "inf" not in amdahl_text.located(t)
