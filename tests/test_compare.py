"""Comparing two records and the spread of repeated runs."""
import pandas as pd

from mage.compare import compare, spread


def _rows(values, view="kernel_time", run="r1"):
    return pd.DataFrame([dict(op="op", impl=i, dtype="fp32", shape_set="field", shape="n=1", cache="warm", view=view,
                              round=0, stat="mean", value=v, run=run) for i, v in values.items()])


def test_compare_matches_cases_and_flags_the_ones_that_moved():
    c = compare(_rows({"a": 10.0, "b": 10.0}), _rows({"a": 10.2, "b": 11.0}))
    assert c.set_index("impl")["within"].to_dict() == {"a": True, "b": False}


def test_spread_across_runs():
    runs = pd.concat([_rows({"a": v}, view="event_span", run=f"r{k}") for k, v in enumerate((10.0, 11.0, 12.0))])
    s = spread(runs)
    assert s["runs"].iloc[0] == 3 and abs(s["spread"].iloc[0] - 2 / 11) < 1e-12
