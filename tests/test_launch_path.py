"""The launch-path breakdown (mage.ext.launch_path.breakdown) and the lean launch path (kernels/_triton): rows in the
schema that add up, the memoised config choice giving bit-identical results, bad input still refused."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from kernels._triton import TileTable, common, stages
from tests.support.kernel_checks import assert_refuses, cpu_only, gpu, module
from mage import data, ops, registry
from mage.errors import MageInputError
from mage.ext.launch_path import breakdown as launch_path

TRITON_OPS = [i.op for i in registry.impls(names=["triton"], dtype="fp32")]


def _small(op: str, n: int = 2) -> list[dict]:
    """The op's ``n`` smallest awkward shapes that are not empty (the interpreter is slow)."""
    shapes = [s for s in ops.OPS[op].awkward if all(v != 0 for v in s.values() if isinstance(v, int))]
    return sorted(shapes, key=lambda s: math.prod(v for v in s.values() if isinstance(v, int)))[:n]


def _tables(op: str) -> list:
    """The op's tile tables (one per precision, or one for all)."""
    tiles = getattr(module(op), "TILES", {})
    return [t for t in (tiles.values() if isinstance(tiles, dict) else [tiles]) if isinstance(t, TileTable)]


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


def test_a_chosen_config_is_the_callers_copy():
    tiles = module("layernorm").TILES
    for shape in (dict(R=1024, C=1024), dict(R=7, C=9)):
        assert tiles.choose(shape, dict(num_warps=8)) == dict(tiles.choose(shape), num_warps=8)
    a = tiles.choose(dict(R=7, C=9))
    a["BLOCK_R"] = -1  # the caller's copy: the memo keeps its own
    assert tiles.choose(dict(R=7, C=9))["BLOCK_R"] != -1


@pytest.mark.parametrize("op", ["layernorm", "bias_gelu"])
def test_unknown_config_still_refused_every_call(op):
    for _ in range(2):  # a refused config is never memoised
        assert_refuses(module(op).TILES.choose, op, "config", dict(R=4, C=4), dict(NOT_A_KEY=1))


@cpu_only
@pytest.mark.parametrize("op", TRITON_OPS)
def test_memoised_path_is_bit_identical(op):
    """The first call (empty memos: the plain path) and later calls (memo hits) give the same bits."""
    im = registry.get(op, "triton")
    for shape in _small(op):
        inputs = ops.OPS[op].inputs(shape, seed=1, dist="heavy")
        inputs = im.prepare(*inputs) if im.prepare else inputs
        for table in _tables(op):  # the tile tables' memos of choices and plans
            table._memo.clear()
            table.plans.clear()
        if isinstance(getattr(module(op), "_PLANS", None), dict):  # the neighbour launcher's split plans
            module(op)._PLANS.clear()
        plain = im.fn(*inputs)
        fast = [im.fn(*inputs) for _ in range(2)]
        for y in fast:
            assert torch.equal(torch.nan_to_num(y, 7.0), torch.nan_to_num(plain, 7.0)), (op, shape)


@cpu_only
def test_watching_a_call_restores_the_launch_path():
    before = (TileTable.choose, TileTable.plan, common.launch)
    im = registry.get("bias_gelu", "triton")
    parts = stages.hook("bias_gelu", {}, im, ops.OPS["bias_gelu"].inputs(dict(R=2, C=3)))
    assert (TileTable.choose, TileTable.plan, common.launch) == before
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


# ---- the launch-path cut: checks once through the launcher's fast path, plans memoised per launcher
CUT_OPS = ["matmul", "bias_gelu", "layernorm", "triangle"]


def _mutations(inputs):
    """Bad variants of a good input set, one argument changed each: (position, inputs)."""
    for i, t in enumerate(inputs):
        swaps = [[1.0] * 2, t.double(), t.to(torch.int32), t.unsqueeze(0), t.to("meta"),
                 t.new_zeros((0,) + tuple(t.shape[1:])) if t.dim() else t]
        swaps += [t.new_zeros(tuple(s + (d == k) for d, s in enumerate(t.shape))) for k in range(t.dim())]
        swaps += [t.new_zeros(tuple(s - (d == k) for d, s in enumerate(t.shape))) for k in range(t.dim()) if t.shape[k]]
        for bad in swaps:
            yield i, inputs[:i] + [bad] + inputs[i + 1:]


@pytest.mark.parametrize("op", CUT_OPS)
def test_fast_checks_pass_only_what_the_spec_passes(op):
    """The launcher's fast predicate is True only for inputs the spec's validation accepts, and every
    input the spec refuses is refused by the launcher with the same operation and argument."""
    mod, spec = module(op), ops.OPS[op]
    good = list(spec.inputs(dict(spec.shapes["field"][0], **_tiny(op)), seed=0))
    assert mod._good(*good)
    refused = 0
    for i, bad in _mutations(good):
        try:
            spec.validate(*bad)
        except MageInputError as e:
            refused += 1
            assert not mod._good(*bad), (op, i, e)
            err = assert_refuses(getattr(mod, op), op, e.arg, *bad)
            assert err.arg == e.arg
        else:
            if any(t.device.type == "meta" for t in bad if isinstance(t, torch.Tensor)):
                assert_refuses(getattr(mod, op), op, spec.args[i], *bad)  # no memory: the device check
    assert refused >= 4 * len(good), refused  # type, dtype, rank, device at least, per argument


def _tiny(op: str) -> dict:
    return {"matmul": dict(M=3, K=5, N=4), "bias_gelu": dict(R=3, C=5), "layernorm": dict(R=3, C=5),
            "triangle": dict(N=3, C=2)}[op]


@pytest.mark.parametrize("op", CUT_OPS)
def test_fast_checks_refuse_every_call_not_only_the_first(op):
    """A refused input is refused again after good calls of the same shape filled the plan memo."""
    mod, spec = module(op), ops.OPS[op]
    good = list(spec.inputs(_tiny(op), seed=0))
    bad = [good[0].double()] + good[1:]
    for _ in range(2):
        assert_refuses(getattr(mod, op), op, spec.args[0], *bad)


def test_plans_refuse_bad_configs_every_call_and_never_store_them():
    mm, tri = module("matmul"), module("triangle")
    A, B = ops.OPS["matmul"].inputs(dict(M=3, K=5, N=4), seed=0)
    X, Y = ops.OPS["triangle"].inputs(dict(N=3, C=2), seed=0)
    for _ in range(2):
        assert_refuses(mm.matmul, "matmul", "config", A, B, dtype="tf32", B_KMAJOR=2)
        assert_refuses(mm.matmul, "matmul", "config", A, B, NOT_A_KEY=1)
        assert_refuses(tri.triangle, "triangle", "config", X, Y, LAYOUT="sideways")
    assert not any(("B_KMAJOR", 2) in k[-1] for t in _tables("matmul") for k in t.plans)
    assert not any(("LAYOUT", "sideways") in k[-1] for t in _tables("triangle") for k in t.plans)


def test_plan_memo_is_keyed_and_bounded():
    from kernels._triton import tile_table
    table, made = TileTable("op", {"a": dict(X=1, num_warps=4)}, base="a", sizes=("n",)), []

    def make(consts, launch, *key):
        made.append(key)
        return consts, launch, key
    assert table.plan(make, (1,), {}, (2, 1)) == ({"X": 1}, {"num_warps": 4}, (1, (2, 1)))
    assert table.plan(make, (1,), {}, (2, 1)) == ({"X": 1}, {"num_warps": 4}, (1, (2, 1))) and len(made) == 1
    table.plan(make, (1,), {}, (1, 2))  # another stride: another plan
    assert len(made) == 2
    table.plan(make, (1,), dict(X=[1]), (2, 1))  # unhashable: planned, not stored
    table.plan(make, (1,), dict(X=[1]), (2, 1))
    assert len(made) == 4 and len(table.plans) == 2
    for i in range(tile_table._MEMO_LIMIT + 5):
        table.plan(make, (i,), {})
    assert len(table.plans) <= tile_table._MEMO_LIMIT


def test_host_arithmetic_matches_triton_and_max_offset():
    import triton
    for a in (0, 1, 15, 16, 17, 1000, 2**31 + 3):
        for b in (1, 16, 128):
            assert common.cdiv(a, b) == triton.cdiv(a, b)
    base = torch.empty(6, 7, 5)
    for t in (base, base.transpose(0, 2), base[:, ::2], base[:1], base[:0], base.expand(2, 6, 7, 5)[0]):
        assert common.reach(t.shape, t.stride()) == common.max_offset(t)


@cpu_only
def test_plans_hold_across_strides():
    """Same sizes, other strides (a transposed B, a padded x): each call runs with its own plan and
    matches a call made with the memo empty, bit for bit."""
    mm, bg = module("matmul"), module("bias_gelu")
    A, B = ops.OPS["matmul"].inputs(dict(M=5, K=6, N=7), seed=2)
    x, b = ops.OPS["bias_gelu"].inputs(dict(R=4, C=9), seed=2)
    calls = [(mm.matmul, (A, B), {}), (mm.matmul, (A, B.t().contiguous().t()), {}),
             (mm.matmul, (A.t().contiguous().t(), B), dict(dtype="tf32")),
             (bg.bias_gelu, (x, b), {}), (bg.bias_gelu, (torch.cat([x, x], 1)[:, :9], b), {})]
    for op in ("matmul", "bias_gelu"):
        for table in _tables(op):
            table.plans.clear()
    warm = [fn(*a, **k) for fn, a, k in calls]
    for (fn, a, k), y in zip(calls, warm):
        for table in _tables(fn.__module__.split(".")[1]):
            table.plans.clear()
        assert torch.equal(fn(*a, **k), y)


@cpu_only
def test_stage_checks_run_the_launchers_checks(monkeypatch):
    mod, seen = module("bias_gelu"), []
    monkeypatch.setattr(mod, "_checked", lambda *a: seen.append(a))
    parts = stages.hook("bias_gelu", {}, registry.get("bias_gelu", "triton"), ops.OPS["bias_gelu"].inputs(dict(R=2, C=3)))
    dict(parts["stages"])[stages.CHECKS]()
    assert len(seen) >= 2  # the watched call, then the stage
