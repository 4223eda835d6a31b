"""matmul's definition: the float64 reference against loops, the cost model by hand, bad input."""
import functools

import numpy as np
import pytest
import torch

import mage
from mage import facets, ops
from mage.errors import MageInputError

SPEC = ops.get("matmul")


def test_reference_against_loops():
    A, B = SPEC.inputs(dict(M=3, K=4, N=2), seed=3)
    a, b = A.double().numpy(), B.double().numpy()
    want = [[sum(a[i, k] * b[k, j] for k in range(4)) for j in range(2)] for i in range(3)]
    np.testing.assert_allclose(SPEC.reference(A, B).numpy(), want, rtol=1e-12)


def test_cost_by_hand():
    assert SPEC.cost(dict(M=2, K=3, N=4)) == (2 * 2 * 3 * 4, 4 * (6 + 12 + 8))
    assert SPEC.cost(dict(M=2, K=3, N=4), "bf16")[1] == 2 * (6 + 12 + 8)


def test_reuse_by_hand():
    # a 16 x 16 tile, 16 deep: 512 distinct values serve 4096 multiply-adds
    assert facets.of("matmul").reuse(dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)) == dict(loads=512, fmas=4096, fmas_per_load=8.0)


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.randn(3, 4).double(), torch.randn(4, 2)), r"matmul: argument 'A' must have dtype"),
    (lambda: (torch.randn(3, 4), torch.randn(5, 2)), r"matmul: argument 'B' has size 5 in dim 0"),
    (lambda: (torch.randn(3, 4, 1), torch.randn(4, 2)), r"matmul: argument 'A' must have 2 dimensions"),
    (lambda: (torch.randn(3, 4), "B"), r"matmul: argument 'B' must be a torch.Tensor"),
])
def test_bad_input_names_the_argument(make, match):
    with pytest.raises(MageInputError, match=match):
        mage.run("matmul", "pytorch", *make())


# ---- the Rust tensor-core column (precision fp32x3) -------------------------------------------------
def _rust_fp32x3():
    from kernels.matmul.rust_impl import FP32X3_IMPL
    return FP32X3_IMPL




def _awkward_large_shapes(n: int = 32, seed: int = 14):
    """Shapes that miss the 128 x 128 x 16 tile in every way: ragged M and N, K odd or not a multiple
    of 4 (unaligned rows), K up to 8192, a few exact multiples and thin edges."""
    import random
    rnd = random.Random(seed)
    fixed = [dict(M=4096, K=8192, N=129), dict(M=1, K=8192, N=1), dict(M=257, K=8191, N=255),
             dict(M=128, K=16, N=128), dict(M=127, K=17, N=3)]
    rand = [dict(M=rnd.randint(1, 1100), K=rnd.choice([rnd.randint(1, 64), rnd.randint(1, 8192)]),
                 N=rnd.randint(1, 1100)) for _ in range(n - len(fixed))]
    return fixed + rand


def test_rust_fp32x3_is_registered_at_its_precision():
    from mage.registry import impls
    im = _rust_fp32x3()
    assert im.family == "rust" and im.dtype == "fp32x3" and im.needs_cuda
    assert impls("matmul", names=["rust"], dtype="fp32x3") == [im]
    assert SPEC.tol("fp32x3") == SPEC.tol("fp32")  # FP32 accuracy is the point of the column


def test_rust_fp32x3_refuses_bad_input_before_any_launch():
    fn = _rust_fp32x3().fn
    with pytest.raises(MageInputError, match=r"matmul: argument 'B' has size 5 in dim 0"):
        fn(torch.randn(3, 4), torch.randn(5, 2))
    with pytest.raises(MageInputError, match=r"matmul: argument 'A' must be on a CUDA device"):
        fn(torch.randn(3, 4), torch.randn(4, 2))


gpu = pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))


@gpu
@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_gpu_rust_fp32x3_at_awkward_shapes(dist):
    from mage.check import check
    im = _rust_fp32x3()
    if im.runs_on("cuda"):
        pytest.skip(im.runs_on("cuda"))
    failures = []
    for k, shape in enumerate(_awkward_large_shapes()):
        r = check(im, shape, trials=1, seed=k, dist=dist, device="cuda")
        if not r.passed:
            failures.append(f"{mage.ops.shape_key(shape)}: {r.reason}")
    assert not failures, "\n".join(failures)


@gpu
@pytest.mark.parametrize("K", [1023, 4096, 8192])
def test_gpu_rust_fp32x3_is_fp32_not_tf32(K):
    # The tolerance must be able to see a slip to one TF32 product: cuBLAS in TF32 on the same inputs
    # misses it, the three-product kernel meets it (and stays near cuBLAS FP32's own error).
    im = _rust_fp32x3()
    if im.runs_on("cuda"):
        pytest.skip(im.runs_on("cuda"))
    A, B = SPEC.inputs(dict(M=256, K=K, N=384), seed=K, device="cuda")
    ref = A.double() @ B.double()
    def err(C):
        return float((C.double() - ref).norm() / ref.norm())
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = err(A @ B)
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = err(A @ B)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    out = torch.full((256, 384), float("nan"), device="cuda")
    got = im.fn(A, B, out=out)
    assert got is out and not torch.isnan(out).any(), "output not fully written"
    tol = SPEC.tol("fp32x3")
    assert tf32 > tol, f"TF32 passed the FP32 check ({tf32:.2e}): the test cannot see a slip"
    assert err(out) < min(tol, 10 * fp32), f"off by {err(out):.2e} (cuBLAS FP32 {fp32:.2e}, TF32 {tf32:.2e})"


@gpu
def test_gpu_rust_fp32x3_is_one_launch_of_its_kernel():
    from mage.profile import profile
    im = _rust_fp32x3()
    if im.runs_on("cuda"):
        pytest.skip(im.runs_on("cuda"))
    A, B = SPEC.inputs(dict(M=300, K=200, N=100), device="cuda")
    p = profile(lambda: im.fn(A, B), iters=3, warmup=1)
    assert p.launches == 1 and all("fp32x3" in k for k in p.kernel_names), p.kernel_names


@gpu
def test_gpu_rust_versions_compared():
    """Not a pass/fail of speed: every Rust matmul version checked at 4096^3 and its kernel time printed
    (run with -s), the FMA versions beside cuBLAS FP32 and the tensor-core versions beside both. A
    development comparison; the recorded numbers come from `python -m mage measure`."""
    from kernels import _rust
    from kernels.matmul import rust_impl
    from mage.check import check
    from mage.profile import profile
    shape = dict(M=4096, K=4096, N=4096)
    A, B = SPEC.inputs(shape, device="cuda")
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        cublas = profile(lambda: A @ B, iters=20).kernel_us
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    print(f"\ncuBLAS FP32 4096^3: {cublas:.0f} us")
    for v, kernel in enumerate(rust_impl.VERSIONS):
        if kernel == "matmul_scalar":
            continue
        im = _rust.variant("matmul", v)
        r = check(im, dict(M=1000, K=4099, N=1031), trials=1, dist="heavy", device="cuda")
        assert r.passed, (kernel, r.reason)
        us = profile(functools.partial(im.fn, A, B), iters=20).kernel_us
        print(f"{kernel:>20}: {us:7.0f} us, cuBLAS FP32 / it = {cublas / us:.2f}, error (heavy) {r.error:.1e}")


def test_the_scalar_kernel_stops_at_4096_cubed_in_the_sweep(monkeypatch):
    """The sweep's 8192^3 point (issue 14's second fp32x3 shape) would cost the one-thread-an-output
    kernel minutes a case: it is planned up to 4096^3 only, every other column to the end."""
    from mage import measure, registry
    monkeypatch.setattr(registry.Impl, "runs_on", lambda self, device: None)  # plan as on a GPU machine
    said = []
    cases = measure.plan(["matmul"], ["pytorch", "triton", "rust_scalar"], ["sweep"], ["warm"], ["fp32", "fp32x3"],
                         log=said.append)
    assert said == ["left out at M=8192,K=8192,N=8192 (past their max_flops): rust_scalar/fp32"]
    by_shape = {}
    for _, shape, _, _, group in cases:
        by_shape.setdefault(shape["M"], set()).update((i.name, i.dtype) for i in group)
    assert max(by_shape) == 8192
    assert ("rust_scalar", "fp32") in by_shape[4096] and ("rust_scalar", "fp32") not in by_shape[8192]
    assert {("pytorch", "fp32"), ("triton", "fp32"), ("triton", "fp32x3")} <= by_shape[8192]
