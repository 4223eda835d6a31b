"""The launch-path breakdown (mage.launch_path) and the lean launch path (kernels/_triton): rows in the
schema that add up, the memoised config choice giving bit-identical results, bad input still refused."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from kernels._triton import common, stages
from kernels._triton.testing import assert_refuses, cpu_only, gpu, module
from mage import data, launch_path, ops, registry

TRITON_OPS = [i.op for i in registry.impls(names=["triton"], dtype="fp32")]


def _small(op: str, n: int = 2) -> list[dict]:
    """The op's ``n`` smallest awkward shapes that are not empty (the interpreter is slow)."""
    shapes = [s for s in ops.OPS[op].awkward if all(v != 0 for v in s.values() if isinstance(v, int))]
    return sorted(shapes, key=lambda s: math.prod(v for v in s.values() if isinstance(v, int)))[:n]


@pytest.fixture(scope="module")
def rows():
    out = []
    for name in ("triton", "pytorch"):
        im = registry.get("layernorm", name)
        out += launch_path.rows_for(im, dict(R=3, C=5), "field", "20990101T000000Z-test", device="cpu",
                                    calls=2, batches=2)
    return out


@cpu_only
def test_rows_have_the_schema_and_add_up(rows):
    df = pd.DataFrame(rows)
    assert set(data.REQUIRED) <= set(df.columns) and "stage" in df.columns
    assert set(df["view"]) == {launch_path.VIEW} and set(df["unit"]) == {"us"} and set(df["cache"]) == {"n/a"}
    assert not df.duplicated(launch_path.KEY).any()
    med = df[df["stat"] == "median"]
    tri = dict(zip(med[med["impl"] == "triton"]["stage"], med[med["impl"] == "triton"]["value"]))
    for stage in (launch_path.WHOLE, launch_path.AFTER_SYNC, stages.CHECKS, stages.CHOICE, stages.ALLOC,
                  launch_path.OTHER):
        assert stage in tri, stage
    assert all(tri[s] > 0 for s in (stages.CHECKS, stages.CHOICE, stages.ALLOC, launch_path.WHOLE))
    parts = tri[stages.CHECKS] + tri[stages.CHOICE] + tri[stages.ALLOC] + tri.get(stages.LAUNCH, 0)
    assert parts + tri[launch_path.OTHER] == pytest.approx(tri[launch_path.WHOLE])
    assert parts < tri[launch_path.WHOLE]  # the interpreted kernel alone outweighs the wrapper
    # an implementation without a hook gets the generic breakdown: the whole call only
    eager = set(med[med["impl"] == "pytorch"]["stage"])
    assert eager == {launch_path.WHOLE, launch_path.AFTER_SYNC}


@cpu_only
def test_rows_load_with_the_host_stage_view(rows, tmp_path, monkeypatch):
    """Written like every measurement and loaded back, once the schema knows the view and the column
    (the change to mage/data.py this module asks for; applied here for the test only if missing)."""
    if launch_path.VIEW not in data.VIEWS:
        monkeypatch.setitem(data.VIEWS, launch_path.VIEW, "us")
        monkeypatch.setattr(data, "IDENTITY", data.IDENTITY + ["stage"])
    data.merge_csv(pd.DataFrame(rows), tmp_path / launch_path.FILE, launch_path.KEY)
    df = data.load(tmp_path)
    assert len(df) == len(rows) and set(df["stage"]) == {r["stage"] for r in rows}


def test_summary_reads_the_ratio():
    rows = [dict(op="o", shape="n=1", impl=i, dtype="fp32", stage=launch_path.WHOLE, stat="median", value=v)
            for i, v in (("pytorch", 40.0), ("triton", 48.0))]
    assert "1.20" in launch_path.summary(rows)


def test_choose_split_is_choose_then_split():
    d = module("layernorm").DEFAULTS
    for shape in (dict(R=1024, C=1024), dict(R=7, C=9)):
        for cfg in ({}, dict(num_warps=8)):
            assert common.choose_split("layernorm", d, shape, cfg) == common.split(common.choose("layernorm", d, shape, cfg))
    a, _ = common.choose_split("layernorm", d, dict(R=7, C=9), {})
    a["BLOCK_R"] = -1  # the caller's copy: the memo keeps its own
    assert common.choose_split("layernorm", d, dict(R=7, C=9), {})[0]["BLOCK_R"] != -1


@pytest.mark.parametrize("op", ["layernorm", "bias_gelu"])
def test_unknown_config_still_refused_every_call(op):
    d = module(op).DEFAULTS
    for _ in range(2):  # a refused config is never memoised
        assert_refuses(common.choose_split, op, "config", op, d, dict(R=4, C=4), dict(NOT_A_KEY=1))


@cpu_only
@pytest.mark.parametrize("op", TRITON_OPS)
def test_memoised_path_is_bit_identical(op):
    """The first call (empty memos: the plain path) and later calls (memo hits) give the same bits."""
    im = registry.get(op, "triton")
    for shape in _small(op):
        inputs = ops.OPS[op].inputs(shape, seed=1, dist="heavy")
        inputs = im.prepare(*inputs) if im.prepare else inputs
        common._CHOSEN.clear()
        common._SPLIT.clear()
        plain = im.fn(*inputs)
        fast = [im.fn(*inputs) for _ in range(2)]
        for y in fast:
            assert torch.equal(torch.nan_to_num(y, 7.0), torch.nan_to_num(plain, 7.0)), (op, shape)


@cpu_only
def test_watching_a_call_restores_the_launch_path():
    before = (common.choose, common.choose_split)
    im = registry.get("bias_gelu", "triton")
    parts = stages.hook("bias_gelu", {}, im, ops.OPS["bias_gelu"].inputs(dict(R=2, C=3)))
    assert (common.choose, common.choose_split) == before
    names = [s for s, _ in parts["stages"]]
    assert names[:3] == [stages.CHECKS, stages.CHOICE, stages.ALLOC]


@cpu_only
def test_stages_of_a_call_on_a_graph():
    """The neighbour column's inputs hold a validated graph, whose arrays live in slots, not a
    __dict__: its stages are measured like any other op's (the H200 run failed here with a TypeError)."""
    im = registry.get("neighbor_agg", "triton")
    spec = ops.OPS["neighbor_agg"]
    shape = dict(n=5, F=3, deg=2, dist="uniform")
    inputs = spec.inputs(shape)
    inputs = im.prepare(*inputs) if im.prepare else inputs
    named = stages._tensors(inputs)
    assert any(k.endswith(".col") for k in named) and all(isinstance(v, torch.Tensor) for v in named.values())
    out = launch_path.rows_for(im, shape, "field", "20990101T000000Z-test", device="cpu", calls=2, batches=2)
    assert {r["stage"] for r in out} >= {"argument checks", "whole call"}


@gpu
def test_gpu_stages_show_the_lean_launch_beside_tritons():
    """On a GPU the Triton column's launch stages are present: the lean launch, its key, and Triton's
    own JITFunction.run of the same launch, which costs more."""
    im = registry.get("layernorm", "triton")
    out = launch_path.rows_for(im, dict(R=64, C=1024), "field", "20990101T000000Z-test", device="cuda",
                               calls=20, batches=5)
    med = {r["stage"]: r["value"] for r in out if r["stat"] == "median"}
    for stage in (stages.LAUNCH, stages.BIND, stages.DRIVER, stages.TRITON_RUN, stages.TRITON_BIND):
        assert stage in med, stage
    assert med[stages.LAUNCH] < med[stages.TRITON_RUN]
