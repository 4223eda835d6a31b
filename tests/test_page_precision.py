"""The operation pages show FP32: an operation measured at several precisions (matmul; LayerNorm, bias +
GELU, neighbour aggregation and the triangle contraction at FP32 and bf16, the triangle also at fp32x3)
draws and reads the same with its other precisions' rows as without them. The synthetic data (tests/support/synthetic.py) holds rows of every registered column."""
from __future__ import annotations


import pytest

pytest.importorskip("plotly")

import mage
from mage import book, data, views as V
from mage.book import claims as C, figures as F
from tests.support.synthetic import make

BF16_OPS = ("layernorm", "bias_gelu", "neighbor_agg", "triangle")


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """(every row, the FP32 rows only, ceilings)."""
    d = make(tmp_path_factory.mktemp("precisions"), sets=("field", "large", "sweep"))
    df = mage.load(d)
    return df, df[df["dtype"] == "fp32"], data.load_ceilings(d)


def test_the_data_holds_bf16_rows_of_the_library_and_triton_columns_only(frames):
    df, _, _ = frames
    bf16 = set(map(tuple, V.select(df, dtype="bf16", op=list(BF16_OPS))[["op", "impl"]].values))
    assert bf16 == {(op, i) for op in BF16_OPS for i in ("pytorch", "torch_compile", "triton")}


FIGURES = {
    **{f"op_views {op}": (lambda df, ceil, op=op: F.op_views(df, op, "GPU X")) for op in BF16_OPS + ("matmul",)},
    "main": lambda df, ceil: F.main(df, "GPU X"),
    "combined": lambda df, ceil: F.combined(df, "GPU X"),
    "warm_cold": lambda df, ceil: F.warm_cold(df, "GPU X"),
    "cost_vs_size": lambda df, ceil: F.cost_vs_size(df, ceil, "GPU X"),
    "roofline": lambda df, ceil: F.roofline(df, ceil, "GPU X"),
    "launch_paths": lambda df, ceil: F.launch_paths(df, ceil, "GPU X"),
    "cards": lambda df, ceil: F.cards(df, mage.load(book.PUBLISHED), "GPU X"),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_figures_draw_the_fp32_rows(frames, name):
    df, fp32, ceil = frames
    assert FIGURES[name](df, ceil).to_json() == FIGURES[name](fp32, ceil).to_json()


def test_numbers_and_sentences_are_the_fp32_rows(frames):
    df, fp32, ceil = frames
    for op in BF16_OPS:
        for impl in ("pytorch", "torch_compile", "triton"):
            for shape_set in ("field", "large"):
                got, want = (V.value(d, op, impl, shape_set=shape_set) for d in (df, fp32))
                assert got == want, (op, impl, shape_set)
        assert C.leaders(df, op).words() == C.leaders(fp32, op).words()
        assert V.first_shape(df, op) == V.first_shape(fp32, op)
    assert C.launch_path(df) == C.launch_path(fp32)
    assert C.smallest_sweep(df, ceil) == C.smallest_sweep(fp32, ceil)
    assert F.bars(df).equals(F.bars(fp32))
