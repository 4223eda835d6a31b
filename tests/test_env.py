"""The environment a run records: the libraries its columns compare with, at the versions measured."""
from __future__ import annotations

from mage import env


def test_declared_libraries_are_recorded_with_their_versions(monkeypatch):
    monkeypatch.setattr(env, "_LIBRARIES", set())
    assert "libraries" not in env.environment("probe")  # nothing declared: nothing claimed
    env.declare_library("pandas", "no-such-distribution-here")
    got = env.environment("probe")["libraries"]
    import pandas
    assert got == {"pandas": pandas.__version__, "no-such-distribution-here": "absent"}


def test_the_comparison_columns_declare_their_library():
    import kernels.trimul_block.cuequivariance_impl  # noqa: F401
    import mage.ext.models  # noqa: F401
    assert {"cuequivariance-torch", "transformers", "torch-geometric"} <= env._LIBRARIES
