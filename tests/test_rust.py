"""The Rust kernels: the build (PTX that ptxas accepts, host tests), the ctypes layer's checks on the
CPU, and on a GPU the kernels themselves (30+ random shapes per op and launch path, determinism,
one launch per call, CUDA errors as Python exceptions)."""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mage import data, ops
from mage.check import check
from mage.errors import MageInputError
from mage.registry import get, impls

rust = pytest.importorskip("kernels.rust")

HERE = Path(rust.__file__).parent / "rust"
GPU = torch.cuda.is_available()
gpu = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")]


def _toolchain_missing() -> str | None:
    """Why build.sh cannot run here (None when it can): the same things it looks for."""
    rustc = next((c for c in ("/usr/bin/rustc", shutil.which("rustc")) if c and os.access(c, os.X_OK)), None)
    if rustc is None:
        return "no rustc (apt-get install rustc-web rust-web-src llvm-22)"
    targets = subprocess.run([rustc, "--print", "target-list"], capture_output=True, text=True).stdout.split()
    if "nvptx64-nvidia-cuda" not in targets:
        return f"{rustc} has no nvptx64-nvidia-cuda target (apt-get install rustc-web)"
    if not shutil.which("ptxas") and not os.environ.get("PTXAS"):
        return "no ptxas (CUDA toolkit)"
    return None


@pytest.fixture(scope="session")
def built():
    """Runs build.sh when the toolchain is here (fast when cached); else the library must exist."""
    why = _toolchain_missing()
    if why is None:
        done = subprocess.run([str(HERE / "build.sh")], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"build.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout
    if rust.available():
        pytest.skip(f"Rust toolchain absent ({why}) and the library is not built")
    return ""


# ---- the build -------------------------------------------------------------------------------------
def test_build_gives_ptx_that_ptxas_accepts(built, tmp_path):
    why = _toolchain_missing()
    if why:
        pytest.skip(f"toolchain absent: {why}")
    ptx = rust.PTX_PATH.read_text()
    entries = re.findall(r"^\.visible \.entry (\w+)\(", ptx, flags=re.M)
    assert sorted(entries) == sorted(rust.KERNELS)
    assert not re.search(r"^\.extern", ptx, flags=re.M), "the PTX calls a function it does not define"
    ptxas = os.environ.get("PTXAS") or shutil.which("ptxas")
    done = subprocess.run([ptxas, "-arch=sm_90", str(rust.PTX_PATH), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ptx + "\0" == rust.library().mage_rust_ptx().decode() + "\0"  # the library embeds this PTX


@pytest.mark.parametrize("name", ["host_tests", "device_tests"])
def test_rust_side_tests_pass(built, name):
    """host_tests: launch geometry, argument checks, the neighbor plan, erf/erfc/GELU against f64.
    device_tests: every kernel on the CPU emulator at awkward sizes against f64 loops."""
    binary = rust.BUILD / name
    if not binary.exists():
        pytest.skip(f"{name} not built (toolchain absent)")
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"test result: ok\. (\d+) passed", done.stdout)


# ---- the Python face without a GPU ---------------------------------------------------------------
def test_every_op_has_rust_impls():
    names = {(i.op, i.name) for i in impls() if i.family == "rust"}
    for op in ops.OPS:
        assert (op, "rust") in names and (op, "rust_ptx_py") in names
    assert ("matmul", "rust_scalar") in names
    for i in impls():
        if i.family == "rust":
            assert i.needs_cuda and i.config


def test_missing_library_says_how_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(rust, "LIB_PATH", tmp_path / "libmage_rust.so")
    monkeypatch.setattr(rust, "_LIB", None)  # as in a fresh process
    reason = rust.available()
    assert reason and "make rust" in reason
    assert "make rust" in get("layernorm", "rust").runs_on("cuda")
    with pytest.raises(rust.RustKernelError, match="MAGE_NOT_BUILT.*make rust"):
        rust.library()


def test_validation_happens_before_any_launch():
    x, b = torch.zeros(3, 4), torch.zeros(4)
    with pytest.raises(MageInputError, match="'b' has size 5"):
        rust.bias_gelu(x, torch.zeros(5))
    with pytest.raises(MageInputError, match="'x' must have dtype float32"):
        rust.bias_gelu(x.double(), b)
    with pytest.raises(MageInputError, match="'out' must have shape"):
        rust.bias_gelu(x, b, out=torch.empty(4, 3))
    with pytest.raises(MageInputError, match="must be on a CUDA device"):
        rust.bias_gelu(x, b)
    with pytest.raises(MageInputError, match="'B' has size 3 in dim 0"):
        rust.matmul(torch.zeros(2, 4), torch.zeros(3, 2))
    # bf16 is a valid matmul input for the op, not for these FP32 kernels (which would read past its end)
    with pytest.raises(MageInputError, match="'A' must be float32 for the Rust kernels"):
        rust.matmul(torch.zeros(2, 4, dtype=torch.bfloat16), torch.zeros(4, 2, dtype=torch.bfloat16))
    with pytest.raises(MageInputError, match="CSRGraph"):
        rust.neighbor_agg(torch.zeros(3), torch.zeros(3, 2))


def test_the_library_refuses_a_null_pointer(built):
    """Checked in Rust before the driver is touched, so it needs no GPU."""
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT.*A is a null pointer") as e:
        rust._call("mage_rust_matmul", 0, 0, 0, 0, 0, 4, 4, 4, 1)
    assert e.value.name == "MAGE_BAD_ARGUMENT"
    with pytest.raises(rust.RustKernelError, match="M = -1 must not be negative"):
        rust._call("mage_rust_matmul", 0, 0, 16, 16, 16, -1, 4, 4, 1)


def test_geometry_comes_from_the_library(built):
    assert rust.geometry("matmul", 4096, 4096) == ((32, 32, 1), (256, 1, 1))
    assert rust.geometry("triangle", 384, 128) == ((6, 6, 16), (512, 1, 1))
    assert rust.geometry("bias_gelu", 2048, 512) == ((512, 1, 1), (128, 1, 1))


def test_neighbor_plan_covers_every_edge_once(built):
    graph, _ = ops.OPS["neighbor_agg"].inputs(dict(n=3000, F=4, deg=16, dist="skewed"), seed=3)
    plan = rust._Plan(graph.rowptr)
    assert graph.max_degree > plan.split and plan.parts > 0  # this graph has hubs to cut
    e = plan.entries.view(-1, 6).long()
    covered = torch.zeros(graph.nnz, dtype=torch.int64)
    for lo, hi in zip(e[:, 1].tolist(), e[:, 2].tolist()):
        covered[lo:hi] += 1
    assert bool((covered == 1).all())
    assert sorted(set(e[:, 0].tolist())) == list(range(graph.n))
    assert int((e[:, 2] - e[:, 1]).max()) <= plan.split


# ---- on a GPU ------------------------------------------------------------------------------------
def random_shapes(op: str, count: int = 32, seed: int = 0) -> list[dict]:
    """Sizes that are multiples of nothing in particular, across both code paths of each kernel."""
    rng = random.Random(f"{op}-{seed}")
    r = rng.randint
    make = {
        "matmul": lambda: dict(M=r(1, 300), K=r(1, 300), N=r(1, 300)),
        "bias_gelu": lambda: dict(R=r(1, 700), C=r(1, 5000)),
        "layernorm": lambda: dict(R=r(1, 300), C=r(1, 9000)),
        "triangle": lambda: dict(N=r(1, 90), C=r(1, 40)),
        "neighbor_agg": lambda: dict(n=r(1, 4000), F=r(1, 150), deg=r(0, 24), dist=rng.choice(["uniform", "skewed"])),
    }[op]
    return [make() for _ in range(count)]


RUST_IMPLS = [i for i in impls() if i.family == "rust"]


def _id(i):
    return f"{i.op}-{i.name}"


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl", RUST_IMPLS, ids=_id)
def test_random_and_awkward_shapes(built, impl):
    why = impl.runs_on("cuda")
    if why:
        pytest.skip(why)
    failures = []
    cases = [(s, "normal") for s in random_shapes(impl.op)] + [(s, d) for s in ops.OPS[impl.op].awkward
                                                              for d in ("normal", "heavy")]
    for k, (shape, dist) in enumerate(cases):
        res = check(impl, shape, trials=1, seed=k, dist=dist, device="cuda")
        if not res.passed:
            failures.append(f"{ops.shape_key(shape)} {dist}: {res.reason}")
    assert not failures, f"{len(failures)} of {len(cases)} failed:\n" + "\n".join(failures[:8])


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_neighbor_agg_is_deterministic_with_hubs(built):
    graph, x = ops.OPS["neighbor_agg"].inputs(dict(n=20000, F=64, deg=16, dist="skewed"), seed=5, device="cuda")
    assert rust.plan_for(graph).parts > 0
    first = rust.neighbor_agg(graph, x)
    for _ in range(5):
        assert torch.equal(rust.neighbor_agg(graph, x), first)
    if get("neighbor_agg", "rust_ptx_py").runs_on("cuda") is None:
        assert torch.equal(rust.py_neighbor_agg(graph, x), first)  # same PTX, same bits
    ref = ops.neighbor_agg_reference(graph, x)
    assert float((first.double() - ref).norm() / ref.norm()) < ops.TOLERANCE["fp32"]


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl", RUST_IMPLS, ids=_id)
def test_one_launch_per_call(built, impl):
    from mage.profile import profile
    if impl.runs_on("cuda"):
        pytest.skip(impl.runs_on("cuda"))
    spec = ops.OPS[impl.op]
    shape = spec.shapes["field"][-1]
    inputs = spec.inputs(shape, device="cuda")
    args = impl.prepare(*inputs) if impl.prepare else inputs
    p = profile(lambda: impl.fn(*args), iters=10)
    assert p.launches == 1, f"{p.launches} launches per call: {p.kernel_names}"


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_cuda_errors_come_back_with_their_names(built):
    with pytest.raises(rust.RustKernelError, match="CUDA_ERROR_INVALID_VALUE.*cuLaunchKernel") as e:
        rust._call("mage_rust_bad_launch", 0, rust._stream(0))
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    A = torch.randn(8, 8, device="cuda")
    with pytest.raises(rust.RustKernelError, match="B is a null pointer"):
        rust._call("mage_rust_matmul", 0, rust._stream(0), A.data_ptr(), 0, A.data_ptr(), 8, 8, 8, 1)
    # neither error left the context broken
    torch.testing.assert_close(rust.matmul(A, A), A @ A, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_native_binary_writes_rows_in_our_schema(built):
    df = rust.native_spans("layernorm", dict(R=64, C=256), "field", spans=30)
    df = data.validate(df, "rust_native")
    assert set(df["impl"]) == {"rust_native"} and set(df["view"]) == {"event_span", "graph_span"}
    assert sorted(set(df["round"])) == [0, 1, 2, 3]
    assert (df["value"] > 0).all()
