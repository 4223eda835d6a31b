"""The development tools' pure parts, on the CPU: how the fused probe reads a config with overrides, what the
contraction probe multiplies, and how the GEMM sweep picks, prints and summarises rows with and without the
profiler's kernel time (their GPU paths run on the device only)."""
import importlib.util
from pathlib import Path

import pytest

from kernels.trimul_block import triton_block as tb

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _tool(name):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # importing runs nothing on a GPU: the work is in main()
    return mod


def test_the_probe_reads_a_config_and_its_overrides():
    probe = _tool("probe_trimul_fused")
    name = tb.TILES["bf16"].name_at(dict(N=1024, C=128, H=128))
    dtype, c = probe._config(f"{name}+IN_H=64,IN_WARPS=8,IN_SIG=tanh,FIN_T=True")
    assert dtype == "bf16" and (c["IN_H"], c["IN_WARPS"], c["IN_SIG"], c["FIN_T"]) == (64, 8, "tanh", True)
    assert probe._config(name) == ("bf16", tb.TILES["bf16"][name])
    fp32 = tb.TILES["fp32"].name_at(dict(N=1024, C=128, H=128))
    assert probe._config(f"fp32:{fp32}+BLOCK_K=64") == ("fp32", dict(tb.TILES["fp32"][fp32], BLOCK_K=64))
    with pytest.raises(KeyError):
        probe._config("no_such_config")


def _rows(kernel: bool):
    k = lambda ms, ratio: dict(kernel_ms=ms, kernel_ratio=ratio) if kernel else dict(kernel_ms="", kernel_ratio="")  # noqa: E731
    base = dict(size=4096, precision="tf32", cublas="cuBLAS tf32", tflops=300.0, rel_error=1e-3, status="ok")
    return [dict(base, road="cublas", config="tf32", ms=0.34, ratio_to_cublas=1.0, **k(0.33, 1.0)),
            dict(base, road="hopper", config="a", ms=0.39, ratio_to_cublas=0.87, **k(0.36, 0.92)),
            dict(base, road="hopper", config="b", ms=0.40, ratio_to_cublas=0.85, **k(0.34, 0.97))]


@pytest.mark.parametrize("kernel", (False, True))
def test_the_sweep_prints_and_summarises_with_or_without_kernel_time(kernel, capsys):
    sweep = _tool("sweep_gemm_hopper")
    for r in _rows(kernel):
        sweep._print(r)
    sweep._summary(_rows(kernel))
    out = capsys.readouterr().out
    assert ("kernel 0.340 ms x0.97" in out) == kernel
    assert "by do_bench" in out and "x0.87 of cuBLAS tf32" in out  # config a is faster by do_bench
    assert ("by kernel time" in out) == kernel
    if kernel:  # and b by kernel time
        assert out.split("by kernel time")[1].count(" b ") == 1


def test_the_sweep_reads_overrides_as_integers_and_refuses_others():
    sweep = _tool("sweep_gemm_hopper")
    assert sweep._overrides(["SPLIT=2,GROUP_M=4", "GROUP_M=16"]) == [dict(SPLIT=2, GROUP_M=4), dict(GROUP_M=16)]
    for bad in ("SPLIT", "SPLIT=two", "SPLIT=2,"):
        with pytest.raises(SystemExit, match="KEY=INTEGER"):
            sweep._overrides([bad])


def test_the_sweep_takes_configs_matching_any_of_several_names():
    sweep = _tool("sweep_gemm_hopper")
    names = [name for road, name, _ in sweep._cases(4096, "fp32x3", False, ["_w8_s2_split", "_w8_s3_ps_split"]) if road == "hopper"]
    assert names == ["m128_n128_k32_w8_s3_ps_split", "m128_n128_k32_w8_s2_split"]


def test_every_way_the_contraction_probe_asks_for_is_the_same_product():
    import torch
    probe = _tool("probe_contraction")
    at, bt = torch.randn(1, 3, 5, 5), torch.randn(1, 3, 5, 5)
    want = at @ bt.transpose(-1, -2)
    for name, _lib, call in probe._ways(at, bt, o := torch.full_like(at, float("nan"))):
        call()  # the library setting is the GPU's; on the CPU each call is the plain product
        assert torch.allclose(o.transpose(-1, -2) if "o^T" in name else o, want, atol=1e-5), name

