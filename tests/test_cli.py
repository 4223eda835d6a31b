"""The command line on a machine without a GPU, and the rule that measuring imports no plotting. The
commands run in this process (``mage_cli``); the first test runs the real ``python -m mage``."""
import os
import subprocess
import sys

import pytest
import torch
from tests.support.mage_cli import mage

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_the_real_command_line():
    """The entry point as a user types it: a new Python, the module run as __main__, argparse's exit."""
    r = subprocess.run([sys.executable, "-m", "mage", "check", "--ops", "softmax"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 2 and "invalid choice" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_measure_without_cuda_says_so(tmp_path):
    r = mage("measure", "--out", str(tmp_path))
    assert r.returncode != 0 and "no CUDA device here" in r.stderr
    assert not list(tmp_path.iterdir())


def test_check_runs_on_cpu():
    r = mage("check", "--ops", "layernorm", "bias_gelu", "--impls", "pytorch", "--trials", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed, 0 failed" in r.stdout and "layernorm" in r.stdout


def test_bad_op_is_refused():
    r = mage("check", "--ops", "softmax")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_measuring_imports_no_plotting_or_notebook_package():
    code = ("import sys, mage, mage.measure, mage.check, mage.timing, mage.profile, mage.ceilings, "
            "mage.env, mage.data, mage.registry; mage.impls(); "
            "bad = [m for m in ('plotly', 'ipywidgets', 'nbclient', 'myst_nb', 'matplotlib') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def _one_line_error(r, *words):
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("trials", ["0", "-3"])
def test_check_with_no_trials_is_refused(tmp_path, trials):
    r = mage("check", "--ops", "layernorm", "--impls", "pytorch", "--trials", trials, "--out", str(tmp_path))
    assert r.returncode == 2 and "--trials" in r.stderr and "passed" not in r.stdout
    assert not (tmp_path / "checks.csv").exists()


def test_unknown_impl_is_one_line():
    _one_line_error(mage("check", "--impls", "bogus"), "mage check:", "bogus", "pytorch")


@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton without its interpreter on a CPU machine")
def test_nothing_runnable_is_one_line():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    _one_line_error(mage("check", "--ops", "layernorm", "--impls", "triton", env=env),
                    "mage check:", "TRITON_INTERPRET=1")


def test_missing_data_folder_is_one_line():
    _one_line_error(mage("targets", "/nonexistent"), "mage targets:", "/nonexistent")


def test_corrupt_data_is_one_line(tmp_path):
    (tmp_path / "field.csv").write_text("op,impl\nmatmul,pytorch\n")
    _one_line_error(mage("targets", str(tmp_path)), "mage targets:", "missing columns")


def test_where_measures_one_case_again_without_its_set(monkeypatch):
    from mage import measure, registry
    monkeypatch.setattr(registry.Impl, "runs_on", lambda self, device: None)  # plan as on a GPU machine
    # one precision: the aggregation also has a bf16 column, whose cases are the same shapes again
    both = measure.plan(["neighbor_agg"], ["pytorch"], ["large"], ["warm"], ["fp32"])
    skewed = measure.plan(["neighbor_agg"], ["pytorch"], ["large"], ["warm"], ["fp32"], where={"dist": "skewed"})
    assert sorted(c[1]["dist"] for c in both) == ["skewed", "uniform"]
    assert [c[1]["dist"] for c in skewed] == ["skewed"]
    # values compare as text (a shape's ints too); a key no shape has selects nothing
    assert len(measure.plan(["neighbor_agg"], ["pytorch"], ["large"], ["warm"], ["fp32"], where={"F": "64"})) == 2
    assert measure.plan(["neighbor_agg"], ["pytorch"], ["large"], ["warm"], ["fp32"], where={"graph": "x"}) == []


def test_a_set_of_one_operations_own_is_a_choice_and_leaves_the_others_out(monkeypatch):
    """``--shapes contest`` (the GPU MODE task's shapes) and ``af3`` were refused by a fixed list of three
    sets; a set only some operations name measures those and leaves the rest out, not a KeyError."""
    from mage import measure, ops, registry
    from mage.__main__ import build_parser
    monkeypatch.setattr(registry.Impl, "runs_on", lambda self, device: None)  # plan as on a GPU machine
    assert {"contest", "af3"} <= set(ops.shape_sets()) and ops.shape_sets()[:3] == ["field", "large", "sweep"]
    assert build_parser().parse_args(["measure", "--shapes", "contest", "af3", "--out", "x"]).shapes == ["contest", "af3"]
    cases = measure.plan(["matmul", "trimul_gpumode", "trimul_block"], ["pytorch"], ["contest", "af3"], ["warm"], ["fp32"])
    assert {c[0].name for c in cases} == {"trimul_gpumode", "trimul_block"}
    assert [c[1]["N"] for c in cases if c[0].name == "trimul_block"] == [256, 512, 768, 1024]
    assert measure.plan(["matmul"], ["pytorch"], ["contest"], ["warm"], ["fp32"]) == []


def test_a_column_is_left_out_of_the_shapes_outside_its_stated_limits(monkeypatch):
    """cuEquivariance takes hidden widths in multiples of 32: at the AF3-class shapes (128) its columns are
    planned, at a width of 41 they are left out and the log says why, never run to fail or time."""
    from mage import measure, ops, registry
    monkeypatch.setattr(registry.Impl, "runs_on", lambda self, device: None)  # plan as on a GPU machine
    spec = ops.get("trimul_block")
    monkeypatch.setitem(spec.shapes, "af3", [dict(N=8, C=128, H=128), dict(N=8, C=128, H=41)])
    heard = []
    cases = measure.plan(["trimul_block"], ["cuequivariance", "pytorch"], ["af3"], ["warm"], ["fp32"], log=heard.append)
    names = {c[1]["H"]: sorted(i.name for i in c[4]) for c in cases}
    assert names == {128: ["cuequivariance", "pytorch"], 41: ["pytorch"]}, names
    assert any("stated limits" in h and "multiples of 32" in h for h in heard), heard


def test_where_takes_key_value_pairs():
    from mage.cli_common import parse_where as _where
    from mage.errors import MageInputError
    assert _where(["dist=skewed", "F=64"]) == {"dist": "skewed", "F": "64"} and _where(None) == {}
    for bad in ("skewed", "=skewed"):
        with pytest.raises(MageInputError, match="--where"):
            _where([bad])


def test_where_picks_the_tile_sweeps_shapes_too(monkeypatch, tmp_path):
    from mage import measure
    seen = []
    monkeypatch.setattr(measure, "measure_case", lambda spec, shape, *a, **k: (seen.append(shape["dist"]), ([], []))[1])
    measure.measure_tiles(["neighbor_agg"], ["large"], tmp_path, measure.Settings(), log=lambda s: None,
                          names=["triton"], where={"dist": "skewed"})
    assert seen and set(seen) == {"skewed"}
