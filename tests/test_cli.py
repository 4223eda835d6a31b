"""The command line on a machine without a GPU, and the rule that measuring imports no plotting."""
import subprocess
import sys

import pytest
import torch

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def mage(*args, env=None):
    return subprocess.run([sys.executable, "-m", "mage", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env=env)


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
