"""The launch-path breakdown figure and sentence on hand-made 'host_stage' rows: the drawn stages add
up to the whole call (nested and alternative stages never counted twice), one button per operation,
the target marker at 1.2x the baseline, and a 'not measured' figure without the view."""
from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("plotly")

from mage.book import figures as F  # noqa: E402
from mage.book import figure_launch as L  # noqa: E402
from mage.ext.launch_path.breakdown import AFTER_SYNC, OTHER, WHOLE  # noqa: E402

SHAPE = {"bias_gelu": "R=2048,C=512", "matmul": "M=1024,K=1024,N=1024"}


def _rows(op, impl, dtype, stages: dict) -> list[dict]:
    return [dict(op=op, impl=impl, dtype=dtype, shape=SHAPE[op], shape_set="field", cache="n/a", view="host_stage",
                 round=0, stat=stat, value=v if stat == "median" else v * 0.9, stage=s, run="r1")
            for s, v in stages.items() for stat in ("median", "min")]


def _triton(whole, checks, choice, alloc, launch, bind, operator):
    # what mage.ext.launch_path.breakdown writes: the remainder from the top-level stages, the driver call and the
    # dispatch as differences, the operator and Triton's own launch as whole alternative entries
    other = whole - (checks + choice + alloc + launch)
    return {WHOLE: whole, AFTER_SYNC: whole + 1, "argument checks": checks, "config choice": choice,
            "allocation": alloc, "Triton launch": launch, "launcher argument binding": bind, OTHER: other,
            "JITFunction.run launch": launch + 3.0, "torch.library operator": operator,
            "driver launch": launch - bind, "custom-op dispatch": operator - whole}


@pytest.fixture
def df():
    rows = (_rows("bias_gelu", "pytorch", "fp32", {WHOLE: 16.0, AFTER_SYNC: 16.5})
            + _rows("bias_gelu", "triton", "fp32", _triton(30.4, 2.1, 0.9, 4.0, 14.1, 5.7, 52.2))
            + _rows("matmul", "pytorch", "fp32", {WHOLE: 24.0, AFTER_SYNC: 25.0})
            + _rows("matmul", "pytorch", "tf32", {WHOLE: 25.0, AFTER_SYNC: 25.0})
            + _rows("matmul", "triton", "tf32", _triton(28.0, 2.9, 1.3, 5.6, 12.0, 9.5, 40.0))
            + _rows("matmul", "triton", "fp32x3", _triton(52.3, 2.8, 1.4, 4.3, 20.6, 7.6, 90.0))
            + _rows("matmul", "rust", "fp32", {WHOLE: 14.0, AFTER_SYNC: 15.0}))
    return pd.DataFrame(rows)


def test_parts_partition_the_whole_call_finest_first():
    s = _triton(30.4, 2.1, 0.9, 4.0, 14.1, 5.7, 52.2)
    parts = L.parts_of(s)
    # the launch is drawn as its binding plus its driver call, never beside them; no entry, no dispatch
    assert set(parts) == {"argument checks", "config choice", "allocation", "launcher argument binding",
                          "driver launch", OTHER} and parts[-1] == OTHER
    assert sum(s[p] for p in parts) == pytest.approx(s[WHOLE])
    assert L.parts_of({WHOLE: 10.0, AFTER_SYNC: 11.0}) == [WHOLE]  # no hook: the call as one part


def test_table_and_figure(df):
    t = L.table(df)
    for (op, impl, dtype), g in t.groupby(["op", "impl", "dtype"]):
        assert g["value"].sum() == pytest.approx(g["whole"].iloc[0]), (op, impl, dtype)
        assert "Triton launch" not in set(g["stage"]) and "torch.library operator" not in set(g["stage"])
    assert set(t["impl"]) == {"triton", "pytorch"}  # other columns are not drawn
    # fp32x3 has no eager row: compared with eager FP32
    x3 = t[(t["dtype"] == "fp32x3")]
    assert (x3["base"] == 24.0).all()
    fig = F.launch_breakdown(df, "GPU X")
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert len(labels) == 2
    masks = [b.args[0]["visible"] for b in fig.layout.updatemenus[0].buttons]
    assert all(sum(m[i] for m in masks) == 1 for i in range(len(fig.data)))  # each trace in one view
    diamonds = [tr for tr in fig.data if tr.type == "scatter"]
    target = {y: x for tr in diamonds for y, x in zip(tr.y, tr.x)}
    assert target[next(y for y in target if "tf32" in y)] == pytest.approx(1.2 * 25.0)
    assert "GPU X" in fig.layout.meta["caption"]


def test_not_measured(df):
    fig = F.launch_breakdown(df[df["impl"] != "triton"], "GPU X")
    assert "not measured" in fig.layout.annotations[0].text
    fig = F.launch_breakdown(pd.DataFrame(columns=["op", "view"]), "GPU X")
    assert "not measured" in fig.layout.annotations[0].text
