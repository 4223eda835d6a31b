"""matmul's Hopper road (``triton_hopper.py``): Triton 3.6's interpreter runs host-side tensor
descriptors, so on the CPU the kernel itself is checked against float64: awkward shapes (sizes that are
no multiple of the tiles, K below BLOCK_K, 1x1x1, rows whose strides TMA cannot take), a persistent
grid that walks several tiles a program, B in both layouts, the fused epilogue, every sweep config. The
interpreter computes TF32 and tf32x3 dots in full FP32 and bf16 through FP32 copies, so these check
indexing and layouts, not precision, TMA or wgmma (the GPU sweep does)."""
from __future__ import annotations

import math

import pytest
import torch

from mage import registry
from mage.check import check
from mage.errors import MageInputError
from tests.support.kernel_checks import cpu_only, gpu, rel_err

from kernels.matmul import triton_hopper as hop

SMALL = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=3)
AWKWARD = [(1, 1, 1), (67, 45, 33), (100, 70, 50), (37, 12, 29), (5, 3, 200), (130, 260, 300)]


def _inputs(M, K, N, dtype=torch.float32):
    g = torch.Generator().manual_seed(M * 7919 + K * 31 + N)
    return torch.randn(M, K, generator=g).to(dtype), torch.randn(K, N, generator=g).to(dtype)


@cpu_only
@pytest.mark.parametrize("dtype", ["fp32x3", "tf32", "bf16"])
def test_awkward_shapes_against_float64(dtype):
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    for M, K, N in AWKWARD:
        A, B = _inputs(M, K, N, tdt)
        out = torch.full((M, N), float("nan"), dtype=tdt)  # poisoned: every element must be written
        got = hop.matmul(A, B, out=out, dtype=dtype, **SMALL)
        # bf16 output rounds to 8 bits; FP32 sums agree to rounding
        assert rel_err(got, A.double() @ B.double()) < (6e-3 if dtype == "bf16" else 1e-6), (dtype, M, K, N)


@cpu_only
def test_few_programs_walk_every_tile():
    A, B = _inputs(70, 40, 90)
    for nsm in (1, 3, 7):  # 5 x 3 tiles of 16 x 32: programs walk 15, 5, 2-3 tiles each
        got = hop.gemm(A, B, precision="fp32x3", num_sms=nsm, **SMALL)
        assert rel_err(got, A.double() @ B.double()) < 1e-6, nsm


@cpu_only
def test_b_in_both_layouts_and_views():
    A, B = _inputs(33, 24, 41)
    want = A.double() @ B.double()
    assert rel_err(hop.gemm(A, B.t().contiguous(), precision="tf32", b_nk=True, **SMALL), want) < 1e-6
    assert rel_err(hop.gemm(A, B.t().contiguous().t(), precision="tf32", **SMALL), want) < 1e-6  # K-major view
    assert rel_err(hop.matmul(A.t().contiguous().t(), B, dtype="fp32x3", **SMALL), want) < 1e-6  # column-major A


@cpu_only
@pytest.mark.parametrize("switch", [dict(TMA_STORE=0), dict(EPILOGUE_SUBTILE=1), dict(FLATTEN=1)])
def test_store_and_loop_switches(switch):
    A, B = _inputs(50, 20, 72)
    got = hop.gemm(A, B, precision="tf32", **SMALL, **switch)
    assert rel_err(got, A.double() @ B.double()) < 1e-6


@cpu_only
@pytest.mark.parametrize("epi", ["bias", "gelu", "residual", "gate"])
def test_fused_epilogue(epi):
    A, W = _inputs(45, 28, 37)[0], torch.randn(37, 28)
    b, r = torch.randn(37), torch.randn(45, 37)
    z = A.double() @ W.double().T + b.double()
    kw, want = dict(bias=b), z
    if epi == "gelu":
        kw, want = dict(bias=b, gelu=True), torch.nn.functional.gelu(z)
    elif epi == "residual":
        kw, want = dict(bias=b, gelu=True, residual=r), torch.nn.functional.gelu(z) + r.double()
    elif epi == "gate":
        kw, want = dict(bias=b, gate=r), z * torch.sigmoid(r.double())
    got = hop.gemm(A, W, precision="fp32x3", b_nk=True, **kw, **SMALL)
    assert rel_err(got, want) < 1e-6


@cpu_only
@pytest.mark.parametrize("dtype", ["fp32x3", "tf32"])
def test_every_sweep_config(dtype):
    impl = registry.get("matmul", hop.NAME, dtype)
    for cfg in impl.sweep:
        r = check(impl.variant(**cfg), dict(M=67, K=45, N=33), trials=1, device="cpu")
        assert r.passed, f"{cfg}: {r.reason}"


@cpu_only
def test_the_swapped_product_and_where_it_steps_aside(monkeypatch):
    """'_sw' configs compute C^T = B^T A^T (B's [K, N] tiles as the register operand, C stored transposed):
    at 16-byte-aligned rows they take that road, at odd sizes or with an epilogue or a Linear's [N, K]
    weight the base road, and every case matches float64."""
    names = [n for n, c in hop.TILES["tf32"].configs.items() if c.get("SWAP_AB")]
    assert names
    taken = []
    real = hop._swapped
    monkeypatch.setattr(hop, "_swapped", lambda *a: taken.append(1) or real(*a))
    for name in names:
        cfg = dict(hop.TILES["tf32"][name], BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_stages=2)
        A, B = _inputs(68, 48, 36)  # rows of 48 and 36 floats: 16-byte multiples, tiles cut at the edges
        want = A.double() @ B.double()
        out = torch.full((68, 36), math.nan)
        assert hop.gemm(A, B, precision="tf32", out=out, **cfg) is out and rel_err(out, want) < 1e-6
        assert len(taken) == 1
        bias = torch.randn(36)
        assert rel_err(hop.gemm(A, B, precision="tf32", bias=bias, **cfg), want + bias.double()) < 1e-6
        assert rel_err(hop.gemm(A, B.t().contiguous(), precision="tf32", b_nk=True, **cfg), want) < 1e-6
        A2, B2 = _inputs(67, 45, 33)
        assert rel_err(hop.gemm(A2, B2, precision="tf32", **cfg), A2.double() @ B2.double()) < 1e-6
        assert len(taken) == 1  # none of the last three took it
        taken.clear()


def test_tables_name_their_tiles_and_the_bases_avoid_risky_switches():
    for dtype, table in hop.TILES.items():
        for name, c in table.configs.items():
            assert name.startswith(f"m{c['BLOCK_M']}_n{c['BLOCK_N']}_k{c['BLOCK_K']}_w{c['num_warps']}_s{c['num_stages']}")
        base = table.base_config()
        assert not (base["FLATTEN"] or base["WARP_SPEC"] or base["EPILOGUE_SUBTILE"]), dtype
    assert registry.get("matmul", hop.NAME, "tf32").config_at(dict(M=4096, K=4096, N=4096)) == hop.TILES["tf32"].base_config()


def test_programs_is_at_most_the_tiles(monkeypatch):
    cpu = torch.device("cpu")
    assert hop.programs(cpu, 1) == 1 and hop.programs(cpu, 100) == 4
    monkeypatch.setattr(hop, "_sm_count", lambda index: 132)
    gpu = torch.device("cuda", 0)  # a device object only: nothing runs on it
    assert [hop.programs(gpu, t, per_sm=2) for t in (100, 200, 1024)] == [100, 200, 264]


@cpu_only
def test_a_config_of_two_programs_an_sm_sets_only_the_grid(monkeypatch):
    """PER_SM leaves the config before the launch (every config's product is checked in
    test_every_sweep_config) and reaches the grid's size."""
    seen, real = [], hop.programs
    monkeypatch.setattr(hop, "programs", lambda d, t, per_sm=1: seen.append(per_sm) or real(d, t, per_sm))
    name = next(n for n, c in hop.TILES["fp32x3"].configs.items() if c["PER_SM"] == 2)
    hop.gemm(*_inputs(40, 24, 36), precision="fp32x3", **dict(hop.TILES["fp32x3"][name], **SMALL, num_stages=2))
    assert seen == [2]


def test_bad_input_is_refused_by_name():
    A, B = torch.randn(4, 8), torch.randn(8, 4)
    with pytest.raises(MageInputError, match="dtype"):
        hop.matmul(A, B, dtype="fp32")  # IEEE FP32 has no tensor-core road
    with pytest.raises(MageInputError, match="precision"):
        hop.gemm(A, B, precision="fp16")
    with pytest.raises(MageInputError, match="config"):
        hop.gemm(A, B, precision="tf32", BLOCK_Q=3)
    with pytest.raises(MageInputError):
        hop.matmul(A, torch.randn(7, 4))  # K disagrees


@cpu_only
def test_the_split_is_exact_and_tf32_high():
    from kernels.matmul import _split
    x = torch.randn(37, 70) * torch.logspace(-20, 20, 70)  # every exponent range a model meets
    for t, transpose in ((x, False), (x.t().contiguous(), True)):
        hi, lo = _split.split(t, 37, 70, transpose)
        assert hi.stride(0) % 4 == 0 and hi.stride(1) == 1  # 16-byte rows, as a descriptor needs
        assert torch.equal(hi + lo, x)  # hi + lo is x exactly
        assert not (hi.view(torch.int32) & 0x1FFF).any()  # hi has TF32's 10 mantissa bits, no more
        assert ((lo.abs() <= hi.abs() * 2.0 ** -11) | (hi == 0)).all()  # rounded to nearest: |lo| <= half an ulp


@cpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_k_major_copy_is_exact_at_awkward_shapes(dtype):
    # the road's copy of a B it cannot read in place: every element where it belongs, rows 16-byte aligned
    from kernels.matmul import _split
    wide = torch.randn(140, 203).to(dtype)
    for rows, cols in ((1, 1), (37, 70), (65, 129)):
        x = torch.randn(cols, rows).to(dtype)
        for t, transpose, want in ((x, True, x.t()), (x.t().contiguous(), False, x.t()),
                                   (wide[:cols, 3:3 + rows], True, wide[:cols, 3:3 + rows].t())):
            got = _split.k_major(t, rows, cols, transpose)
            assert got.shape == (rows, cols) and got.stride(1) == 1
            assert (got.stride(0) * got.element_size()) % 16 == 0
            assert torch.equal(got, want)


@cpu_only
def test_operands_split_before_the_gemm():
    names = [n for n, c in hop.TILES["fp32x3"].configs.items() if c["SPLIT"]]
    assert names and all("split" in n.split("_")[5:] for n in names)  # a switch of the name, before '_o2' if any
    for M, K, N in AWKWARD:
        A, B = _inputs(M, K, N)
        want = A.double() @ B.double()
        for cfg in (dict(hop.TILES["fp32x3"][names[0]], **SMALL), dict(hop.TILES["fp32x3"][names[1]], **SMALL)):
            out = torch.full((M, N), float("nan"))
            assert rel_err(hop.gemm(A, B, precision="fp32x3", out=out, **cfg), want) < 1e-6, (M, K, N, cfg)
            assert rel_err(hop.gemm(A, B.t().contiguous(), precision="fp32x3", b_nk=True, **cfg), want) < 1e-6
    A, W = _inputs(45, 28, 37)[0], torch.randn(37, 28)
    b = torch.randn(37)
    got = hop.gemm(A, W, precision="fp32x3", b_nk=True, bias=b, gelu=True, **dict(hop.TILES["fp32x3"][names[0]], **SMALL))
    assert rel_err(got, torch.nn.functional.gelu(A.double() @ W.double().T + b.double())) < 1e-6


@cpu_only
def test_the_split_widens_offsets_by_reach_not_size(monkeypatch):
    # a column slice of a wide tensor: 40 million elements whose last lies 2.4 billion on (meta tensors:
    # shapes only). Judged by its size, the split kernel's offsets stayed 32-bit and wrapped.
    from kernels.matmul import _split
    seen = []

    class _Kernel:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((grid, kw["OFFS_64"]))
    monkeypatch.setattr(_split, "_split_kernel", _Kernel())
    _split.split(torch.empty(40000, 60000, device="meta")[:, :1000], 40000, 1000, False)
    _split.split(torch.empty(64, 5_000_000, device="meta"), 64, 5_000_000, False)  # K past 65535 tiles
    assert seen[0][1] is True and seen[1][0] == (_split.common.cdiv(5_000_000, 64),)


def test_the_linear_operator_takes_the_hopper_road_only_for_fp32_on_sm90(monkeypatch):
    """The model Linear's road, as measured at V-JEPA 2's shapes: the Hopper road's tf32x3 at FP32 on an
    sm_90 card; the plain road at bf16 (where the Hopper road's tiles were slower), off the GPU and under
    the interpreter (which ``available`` alone would let through)."""
    from types import SimpleNamespace as NS

    from kernels._triton import common
    from kernels.matmul import triton_epilogue as te
    monkeypatch.setattr(hop, "available", lambda device=None: True)
    monkeypatch.setattr(common, "interpreting", lambda: False)  # as on a GPU
    road = lambda dtype, cuda: te.linear_road(NS(dtype=dtype, is_cuda=cuda, device="cuda:0" if cuda else "cpu"))  # noqa: E731
    assert road(torch.float32, True) == "hopper"
    assert road(torch.bfloat16, True) == "plain"
    assert road(torch.float32, False) == "plain"
    monkeypatch.setattr(hop, "available", lambda device=None: False)
    assert road(torch.float32, True) == "plain"


@cpu_only
def test_a_strided_bias_is_read_as_its_values():
    """A bias that is a view with a stride (``b[::2]``, which the Linear operator's checks accept) is read
    element by element: the kernel indexes the bias as contiguous, so the road makes it so first."""
    from kernels.matmul import triton_epilogue as te
    A, W = torch.randn(37, 29), torch.randn(45, 29)
    b = torch.randn(90)[::2]
    out = torch.full((37, 45), float("nan"))
    te.hopper_epilogue(A, W, b, out, gelu=True)
    want = torch.nn.functional.gelu(A.double() @ W.double().T + b.double())
    assert rel_err(out, want) < 1e-5


def test_the_interpreter_keeps_the_linear_operator_on_the_plain_road(monkeypatch):
    from types import SimpleNamespace as NS

    from kernels._triton import common
    from kernels.matmul import triton_epilogue as te
    monkeypatch.setattr(hop, "available", lambda device=None: True)
    monkeypatch.setattr(common, "interpreting", lambda: True)
    assert te.linear_road(NS(dtype=torch.float32, is_cuda=True, device="cuda:0")) == "plain"


@gpu
@pytest.mark.parametrize("name", [n for n, c in hop.TILES["fp32x3"].configs.items() if c["SPLIT"]])
def test_gpu_split_configs_keep_fp32_accuracy_at_long_k(name):
    """The tensor cores round their running sums toward zero: a product chained over all of K drifts (9.6e-6
    at 4096^3 for the big product in a chain of its own, kernels/NOTES.md). Every split config stays near
    cuBLAS FP32's own error at K = 8192 and at an awkward shape, the output poisoned first."""
    if not hop.available():
        pytest.fail("the Hopper road needs an sm_90 GPU")
    for M, K, N in ((256, 8192, 384), (257, 8191, 255)):
        g = torch.Generator(device="cuda").manual_seed(K)
        A = torch.randn(M, K, device="cuda", generator=g)
        B = torch.randn(K, N, device="cuda", generator=g)
        ref = A.double() @ B.double()
        err = lambda C: float((C.double() - ref).norm() / ref.norm())  # noqa: E731
        old = torch.backends.cuda.matmul.allow_tf32
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            fp32 = err(A @ B)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
        for b, b_nk in ((B, False), (B.t().contiguous(), True)):
            out = torch.full((M, N), float("nan"), device="cuda")
            hop.gemm(A, b, precision="fp32x3", b_nk=b_nk, out=out, **hop.TILES["fp32x3"][name])
            assert not torch.isnan(out).any(), (name, M, K, N, "output not fully written")
            assert err(out) < 2 * fp32, (name, M, K, N, b_nk, f"{err(out):.2e} against cuBLAS FP32 {fp32:.2e}")


@cpu_only
def test_the_plain_store_fallback_runs_the_loop_unflattened(monkeypatch):
    # a flattened config sized for the TMA store overflows shared memory with plain stores (see the sm_90a test)
    seen = []

    class _Kernel:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((kw["TMA_STORE"], kw["FLATTEN"]))
    monkeypatch.setattr(hop, "_hopper_gemm_kernel", _Kernel())
    cfg = hop.TILES["fp32x3"]["m128_n128_k32_w8_s3_sub_fl_split"]
    for n in (256, 255):  # C's rows 16-byte aligned, then not
        A, B = torch.randn(n, 64), torch.randn(64, n)
        hop.gemm(A, B, precision="fp32x3", **cfg)
    assert seen == [(True, True), (False, False)]
