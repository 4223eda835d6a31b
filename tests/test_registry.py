"""The registry and the one-folder claim: operations are discovered, and a sixth operation added from a
temporary folder (a spec plus a PyTorch implementation) is checked, selected and drawn with no other
change anywhere."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mage import facets, ops, registry

ROOT = Path(__file__).resolve().parent.parent

SIXTH_SPEC = '''
"""A sixth operation, only for the test: y = 2 x (a scale)."""
import torch

from mage.ops import Op, dim, tensor


def validate(x):
    tensor("double_it", "x", x, (torch.float32,), 1)


SPEC = Op(
    name="double_it", args=("x",), equation=r"y_i = 2 x_i",
    make_inputs=lambda s, gen, device, dtype, dist: (torch.randn(s["n"], generator=gen, device=device),),
    reference=lambda x: 2 * x.double(), validate=validate, out_spec=lambda x: (tuple(x.shape), x.dtype),
    flops=lambda s: s["n"], bytes=lambda s, isz=4: 2 * isz * s["n"],
    shapes={"field": [dict(n=1000)], "large": [dict(n=1 << 20)], "sweep": [dict(n=10), dict(n=100)]},
    awkward=[dict(n=1), dict(n=0), dict(n=37)], random_shape=lambda rnd: dict(n=rnd.randint(1, 500)),
)
'''

SIXTH_FACETS = '''
"""How the book names it."""
from mage import facets

facets.declare("double_it", label="doubling", short="x2", order=60)
'''

SIXTH_IMPL = '''
"""Its PyTorch column."""
from kernels._pytorch import register_expression

register_expression("double_it", lambda x: 2 * x)
'''

SCRIPT = '''
import sys
import pandas as pd
from mage import facets, ops, registry
from mage.check import check_all
registry.add_root(sys.argv[1])
assert "double_it" in ops.OPS, list(ops.OPS)
impls = registry.impls("double_it")
assert [i.name for i in impls] == ["pytorch", "torch_compile"], impls
res = check_all([impls[0]], device="cpu", dists=("normal", "heavy"))
assert res["passed"].all() and len(res) == 6, res
from mage import views
rows = pd.DataFrame([dict(op="double_it", impl=i, family="pytorch", dtype="fp32", shape="n=1000", shape_set="field",
                          cache="warm", view=v, round=0, stat="mean", value=x, unit="us", run="r1", source="synthetic")
                     for i, x in (("pytorch", 3.0), ("torch_compile", 2.0))
                     for v in ("kernel_time", "event_span")])
bars = views.bars(rows, shape_set="field")
assert set(bars["impl"]) == {"pytorch", "torch_compile"}, bars
from mage.book import figures
fig = figures.main(rows, "test card")
assert any("doubling" in str(a.text) for a in fig.layout.annotations), [a.text for a in fig.layout.annotations]
print("sixth op ok")
'''


def test_operations_are_discovered_in_figure_order():
    assert [n for n, s in ops.OPS.items() if s.kind == "operation"] == ["matmul", "bias_gelu", "layernorm",
                                                                        "triangle", "neighbor_agg"]
    assert all(facets.of(n).order >= 100 for n, s in ops.OPS.items() if s.kind == "block")  # the blocks come after
    # a model's part (shown with its model, neither among the operations nor the blocks) comes after both
    parts = [n for n, s in ops.OPS.items() if s.kind == "part"]
    assert parts == ["rope3"] and list(ops.OPS)[-len(parts):] == parts
    assert {s.kind for s in ops.OPS.values()} == {"operation", "block", "part"}
    assert not registry.LOAD_ERRORS, registry.LOAD_ERRORS
    for name, spec in ops.OPS.items():
        assert (ROOT / "kernels" / name / "spec.py").exists() and facets.of(name).label and spec.random_shape


def test_a_sixth_operation_needs_only_its_folder(tmp_path):
    pytest.importorskip("plotly")
    pkg = tmp_path / "extra_ops"
    (pkg / "double_it").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "double_it" / "__init__.py").write_text("")
    (pkg / "double_it" / "spec.py").write_text(textwrap.dedent(SIXTH_SPEC))
    (pkg / "double_it" / "facets.py").write_text(textwrap.dedent(SIXTH_FACETS))
    (pkg / "double_it" / "pytorch_impl.py").write_text(textwrap.dedent(SIXTH_IMPL))
    # in a fresh interpreter, so the added operation does not leak into the other tests
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(pkg)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "sixth op ok" in done.stdout, done.stdout + done.stderr


def test_an_unavailable_impl_fails_on_a_gpu_machine(monkeypatch):
    # On a GPU machine a registered implementation that cannot run (library not built) must fail the
    # GPU suite, not skip it, unless the run excludes it by name.
    from tests.support.kernel_checks import usable
    broken = registry.Impl(op="matmul", name="not_built", fn=lambda *a, out=None: None,
                           available=lambda: "the library is not built")
    with pytest.raises(pytest.fail.Exception, match="cannot run on this GPU machine"):
        usable(broken)
    monkeypatch.setenv("MAGE_GPU_EXCLUDE", "not_built")
    with pytest.raises(pytest.skip.Exception, match="excluded"):
        usable(broken)


def test_gpu_failures_are_written_down_as_they_happen(monkeypatch, tmp_path):
    # A GPU run cut by its time limit never prints pytest's summary; the failure log keeps each shape's
    # reason the moment it is found (two runs lost a config's reasons this way).
    from types import SimpleNamespace as NS
    from tests.support import kernel_checks as KC
    impl = registry.get("matmul", "pytorch", "fp32")
    verdicts = iter([NS(passed=True, reason=""), NS(passed=False, reason="3 of 9 elements outside")])
    monkeypatch.setattr(KC, "check", lambda *a, **k: next(verdicts))
    log = tmp_path / "failures.txt"
    monkeypatch.setenv("MAGE_FAILURE_LOG", str(log))
    got = KC.gpu_failures(impl, [dict(M=3, K=4, N=5), dict(M=6, K=7, N=8)])
    assert got == [(dict(M=6, K=7, N=8), "3 of 9 elements outside")]
    assert log.read_text() == "matmul/pytorch/fp32 {'M': 6, 'K': 7, 'N': 8} normal: 3 of 9 elements outside\n"


def test_the_harness_defaults_come_from_roles_the_kernel_packages_claim():
    # mage names no implementation: its defaults (the baseline column, the custom column, the library
    # family) are whatever kernels/_pytorch and kernels/_triton claimed, and an unclaimed role is refused
    import pytest
    from mage import registry
    from mage.errors import MageInputError
    registry.load()
    for role in ("baseline", "custom"):
        assert registry.role(role) in {i.name for i in registry.impls()}
    assert registry.role("library_family") in {i.family for i in registry.impls()}
    with pytest.raises(MageInputError, match="role"):
        registry.role("no such role")


def test_discovery_imports_no_test_module():
    # each op folder's tests sit in its tests/ subfolder, beside the implementations the registry imports:
    # loading the registry (in a fresh interpreter, where pytest has imported nothing) imports none of them
    code = ("import sys\nfrom mage import registry\nregistry.load()\n"
            "print(sorted(m for m in sys.modules if m.startswith(('kernels.', 'tests')) and 'test' in m))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
    assert all((ROOT / "kernels" / op / "tests").is_dir() for op in ops.OPS if (ROOT / "kernels" / op).is_dir())
