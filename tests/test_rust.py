"""The Rust layer without a GPU: the build (PTX that ptxas accepts, host and device tests, lint), the
kernel tables as the one source of names and parameters, the Python face's checks on the CPU, and
rust_native's execution of a span plan (dry run). The kernels on a GPU are tests/test_rust_gpu.py's.

Without a Rust toolchain that can build for the GPU (a rustc with the nvptx target and the library
sources, and ptxas), the build tests skip and say why; with MAGE_REQUIRE_RUST=1 (CI, which installs the
toolchain) such a skip is a failure (tests/support/rust_build.py)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mage import ops
from mage.errors import MageInputError
from mage.registry import get, impls
from mage.timing import SpanPlan

rust = pytest.importorskip("kernels._rust")
from kernels._rust import native  # noqa: E402
from kernels._rust.plan import PLAN_FIELDS, Plan, plan_for  # noqa: E402
from tests.support.rust_build import HERE, build, needs_toolchain, skip_or_fail, toolchain_missing  # noqa: E402

built = pytest.fixture(build, scope="session", name="built")  # the build, once a session



# ---- skipping without the toolchain, failing in CI ------------------------------------------------
def test_a_missing_toolchain_skips_with_its_reason_or_fails_when_required(monkeypatch):
    monkeypatch.delenv("MAGE_REQUIRE_RUST", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no ptxas"):
        skip_or_fail("no ptxas")
    monkeypatch.setenv("MAGE_REQUIRE_RUST", "1")
    with pytest.raises(pytest.fail.Exception, match="MAGE_REQUIRE_RUST=1.*no ptxas"):
        skip_or_fail("no ptxas")


def test_a_rustc_without_library_sources_is_named(tmp_path):
    """A rustup toolchain without rust-src (as ~/.cargo/bin/rustc may be) is told apart, not an error."""
    fake = tmp_path / "rustc"
    root = tmp_path / "sysroot"
    fake.write_text(f"#!/bin/sh\ncase \"$2\" in target-list) echo nvptx64-nvidia-cuda;; sysroot) echo {root};; "
                    "esac\n[ \"$1\" = --version ] && echo 'rustc 0.0.0-test (x)'\nexit 0\n")
    fake.chmod(0o755)
    why = toolchain_missing([str(fake)])
    assert why and "no library sources" in why and "rust-src" in why
    assert "nvptx64" in toolchain_missing([str(tmp_path / "absent")])


# ---- the build -------------------------------------------------------------------------------------
def test_build_gives_ptx_that_ptxas_accepts(built, tmp_path):
    needs_toolchain()
    ptx = rust.PTX_PATH.read_text()
    entries = re.findall(r"^\.visible \.entry (\w+)\(", ptx, flags=re.M)
    assert sorted(entries) == sorted(rust.TABLE) == sorted(rust.kernel_names())
    # each entry carries its table's launch bounds
    for name, k in rust.TABLE.items():
        head = ptx[ptx.index(f".visible .entry {name}("):]
        head = head[:head.index("{")]
        assert f".maxntid {k.threads}, 1, 1" in ptx[ptx.index(f".visible .entry {name}("):][:len(head) + 200]
    assert not re.search(r"^\.extern", ptx, flags=re.M), "the PTX calls a function it does not define"
    ptxas = os.environ.get("PTXAS") or shutil.which("ptxas")
    done = subprocess.run([ptxas, "-arch=sm_90", str(rust.PTX_PATH), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert rust.ptx() == ptx  # the library embeds this PTX


@pytest.mark.slow  # 30-50 s; `make rust` runs the same binaries
@pytest.mark.parametrize("name", ["host_tests", "device_tests"])
def test_rust_side_tests_pass(built, name):
    """host_tests: launch geometry, argument checks, the neighbor plan, the span-plan reader, erf/erfc/GELU
    against f64. device_tests: every kernel on the CPU emulator at awkward sizes against f64 loops."""
    binary = rust.BUILD / name
    if not binary.exists():
        skip_or_fail(f"{name} not built (toolchain absent)")
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"test result: ok\. (\d+) passed", done.stdout)


def test_no_kernel_list_outside_the_tables():
    """Kernel names live in kernels/<op>/rust_table.py only: the shared layer derives everything."""
    variants = [n for n in rust.TABLE if n not in ops.OPS]  # names that are not also an op's name
    assert variants, "the tables should have kernel versions (matmul_scalar, triangle_256, ...)"
    for path in HERE.rglob("*"):
        if path.suffix in (".rs", ".py", ".sh") and "build" not in path.relative_to(HERE).parts:
            text = path.read_text()
            assert not [n for n in variants if re.search(rf"\b{n}\b", text)], f"{path} names a kernel"


# ---- the Python face without a GPU ---------------------------------------------------------------
def test_every_op_has_rust_impls():
    names = {(i.op, i.name): i for i in impls() if i.family == "rust"}
    for op in ops.OPS:
        if not (Path(rust.table.KERNELS_DIR) / op / "rust_table.py").exists():
            continue
        assert (op, "rust") in names and (op, "rust_ptx_py") in names
        n = names[(op, "rust_native")]
        assert n.fn is None and n.own_spans is not None and n.kernels_of == "rust_ptx_py"
    assert ("matmul", "rust_scalar") in names
    assert all(i.needs_cuda and i.config for i in names.values())


def test_missing_library_says_how_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(rust, "LIB_PATH", tmp_path / "libmage_rust.so")
    monkeypatch.setattr(rust, "_LIB", None)  # as in a fresh process
    reason = rust.available()
    assert reason and "make rust" in reason
    assert "make rust" in get("layernorm", "rust").runs_on("cuda")
    with pytest.raises(rust.RustKernelError, match="MAGE_NOT_BUILT.*make rust"):
        rust.library()


def test_validation_happens_before_any_launch():
    bias_gelu = get("bias_gelu", "rust").fn
    x, b = torch.zeros(3, 4), torch.zeros(4)
    with pytest.raises(MageInputError, match="'b' has size 5"):
        bias_gelu(x, torch.zeros(5))
    with pytest.raises(MageInputError, match="'x' must have dtype float32"):
        bias_gelu(x.double(), b)
    with pytest.raises(MageInputError, match="'out' must have shape"):
        bias_gelu(x, b, out=torch.empty(4, 3))
    with pytest.raises(MageInputError, match="must be on a CUDA device"):
        bias_gelu(x, b)
    matmul = get("matmul", "rust").fn
    with pytest.raises(MageInputError, match="'B' has size 3 in dim 0"):
        matmul(torch.zeros(2, 4), torch.zeros(3, 2))
    # bf16 is a valid matmul input for the op, not for these FP32 kernels (which would read past its end)
    with pytest.raises(MageInputError, match="'A' must be float32 for the Rust kernels"):
        matmul(torch.zeros(2, 4, dtype=torch.bfloat16), torch.zeros(4, 2, dtype=torch.bfloat16))
    with pytest.raises(MageInputError, match="CSRGraph"):
        get("neighbor_agg", "rust").fn(torch.zeros(3), torch.zeros(3, 2))


def test_the_neighbor_fast_path_checks_the_graph_on_every_call():
    """An int64 column index read as int32 gave a silently wrong answer: the cheap facts are checked on
    every call, and a graph that fails them goes to the full validation, which refuses it."""
    from kernels.neighbor_agg import rust_impl
    graph, x = ops.OPS["neighbor_agg"].inputs(dict(n=50, F=4, deg=3), seed=1)
    assert rust_impl.graph_is_plain(graph)
    forged = object.__new__(type(graph))
    for slot in type(graph).__slots__:
        object.__setattr__(forged, slot, getattr(graph, slot))
    object.__setattr__(forged, "col", graph.col.long())  # what no public path can make, forged here
    assert not rust_impl.graph_is_plain(forged)
    object.__setattr__(forged, "col", graph.col)
    object.__setattr__(forged, "w", graph.w.double())
    assert not rust_impl.graph_is_plain(forged)
    for fn in (get("neighbor_agg", "rust").fn, get("neighbor_agg", "rust_ptx_py").fn):
        with pytest.raises(MageInputError):
            fn(forged, x)


def test_the_library_refuses_a_null_pointer(built):
    """Checked in Rust, from the kernel's table, before the driver is touched: no GPU needed."""
    with pytest.raises(rust.RustKernelError, match="MAGE_BAD_ARGUMENT.*A is a null pointer") as e:
        rust.launch("matmul", 0, [0, 0, 0, 4, 4, 4], stream=0)
    assert e.value.name == "MAGE_BAD_ARGUMENT"
    with pytest.raises(rust.RustKernelError, match="M = -1 must not be negative"):
        rust.launch("matmul", 0, [16, 16, 16, -1, 4, 4], stream=0)
    with pytest.raises(rust.RustKernelError, match="C = 0: a row needs at least one column"):
        rust.launch("layernorm", 0, [16, 16, 16, 16, 3, 0, 1e-5], stream=0)
    with pytest.raises(rust.RustKernelError, match="takes 6 arguments, got 5"):
        rust._call("mage_rust_launch", 0, 0, rust.pack("matmul", [1] * 6)[0], rust.pack("matmul", [1] * 6)[1], 5)


def test_geometry_comes_from_the_library(built):
    p = 16  # any non-null address: geometry checks pointers as the launch does
    assert rust.geometry("matmul", [p, p, p, 4096, 4096, 4096]) == ((32, 32, 1), (256, 1, 1))
    assert rust.geometry("triangle", [p, p, p, 384, 128]) == ((6, 6, 16), (512, 1, 1))
    assert rust.geometry("bias_gelu", [p, p, p, 2048, 512]) == ((512, 1, 1), (128, 1, 1))
    assert rust.geometry("bias_gelu", [p, p, p, 0, 512]) == ((0, 0, 0), (0, 0, 0))  # nothing to launch


def test_neighbor_plan_covers_every_edge_once(built):
    graph, _ = ops.OPS["neighbor_agg"].inputs(dict(n=3000, F=4, deg=16, dist="skewed"), seed=3)
    plan = Plan(graph.rowptr)
    assert graph.max_degree > plan.split and plan.parts > 0  # this graph has hubs to cut
    e = plan.entries.view(-1, PLAN_FIELDS).long()
    covered = torch.zeros(graph.nnz, dtype=torch.int64)
    for lo, hi in zip(e[:, 1].tolist(), e[:, 2].tolist()):
        covered[lo:hi] += 1
    assert bool((covered == 1).all())
    assert sorted(set(e[:, 0].tolist())) == list(range(graph.n))
    assert int((e[:, 2] - e[:, 1]).max()) <= plan.split


def test_a_rowptr_rewritten_in_place_gets_a_new_plan(built):
    # The plan cache was keyed by the tensor alone: a graph built again from a rowptr rewritten in place
    # (valid, intact) got the old graph's plan, whose rows and edge ranges no longer match (review).
    from kernels.neighbor_agg.graph import CSRGraph
    rp = torch.tensor([0, 1000, 1000, 1000, 1000], dtype=torch.int32)
    col, w = torch.zeros(1000, dtype=torch.int32), torch.ones(1000)
    first = plan_for(CSRGraph.build(rp, col, w, 4))
    rp.copy_(torch.tensor([0, 250, 500, 750, 1000], dtype=torch.int32))
    second = plan_for(CSRGraph.build(rp, col, w, 4))
    assert second is not first and second.tasks == Plan(rp).tasks != first.tasks


@pytest.mark.parametrize("n,rounds,block,warmup", [(300, 3, 10, 10), (30, 3, 10, 2), (7, 2, 3, 0), (50, 1, 4, 1),
                                                   (100, 4, 7, 3)])
def test_rust_native_runs_the_plan_it_is_given(built, n, rounds, block, warmup):
    """The dry run (no GPU) executes the plan through the same executor as a real run: the rounds of
    its timed passes, in order, are the plan's."""
    if native.available():
        skip_or_fail(native.available())
    plan = SpanPlan.make(n=n, rounds=rounds, block=block, warmup=warmup)
    got = native.dry_run(plan)
    assert got["round_sequence"] == plan.round_sequence()
    assert got["lead_in"] == plan.lead_in


def test_rust_native_refuses_a_bad_plan(built):
    if native.available():
        skip_or_fail(native.available())
    done = subprocess.run([str(rust.NATIVE_PATH), "--dry-run", "--plan", '{"rounds": 2}'], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "missing field" in done.stderr


def test_rust_native_argument_file_follows_the_table():
    A, B, C = torch.ones(2, 3), torch.ones(3, 4), torch.empty(2, 4)
    data = native.args_file("matmul", (A, B, C, 2, 3, 4))
    assert data[:4] == (6).to_bytes(4, "little")
    assert len(data) == 4 + 6 * 9 + A.numel() * 4 + B.numel() * 4  # the output travels as a size only
    with pytest.raises(rust.RustKernelError, match="takes 6 arguments"):
        native.args_file("matmul", (A, B, C))
