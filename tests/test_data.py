"""Tidy data: round trip, schema errors that say what is wrong, atomic writes, merging re-runs."""
import json
import os

import pandas as pd
import pytest

import mage
from mage import data
from mage.data import DataError


def _rows(**over):
    r = dict(op="matmul", impl="pytorch", dtype="fp32", shape="M=2,K=2,N=2", shape_set="field", cache="warm",
             view="kernel_time", round=0, stat="mean", value=1.5, unit="us")
    r.update(over)
    return pd.DataFrame([r])


def test_round_trip(tmp_path):
    df = pd.concat([_rows(), _rows(view="launches", value=1.0, unit="count")])
    data.save_csv(df, tmp_path / "field.csv")
    back = mage.load(tmp_path)
    assert list(back["view"]) == ["kernel_time", "launches"] and back["value"].tolist() == [1.5, 1.0]


@pytest.mark.parametrize("bad,msg", [
    (dict(view="speed"), "unknown view"),
    (dict(shape_set="medium"), "unknown shape_set"),
    (dict(cache="lukewarm"), "unknown cache"),
    (dict(value="fast"), "non-numeric value"),
    (dict(unit="ms"), "must be in us"),
])
def test_schema_errors_say_what_is_wrong(tmp_path, bad, msg):
    data.save_csv(_rows(**bad), tmp_path / "x.csv")
    with pytest.raises(DataError, match=msg):
        mage.load(tmp_path)


def test_missing_column(tmp_path):
    data.save_csv(_rows().drop(columns=["stat"]), tmp_path / "x.csv")
    with pytest.raises(DataError, match=r"x.csv: missing columns \['stat'\]"):
        mage.load(tmp_path)


def test_empty_or_absent_directory(tmp_path):
    with pytest.raises(DataError, match="no measurement CSV"):
        mage.load(tmp_path)
    with pytest.raises(DataError, match="no such data directory"):
        mage.load(tmp_path / "nope")


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    f = tmp_path / "field.csv"
    data.save_csv(_rows(), f)
    before = f.read_text()

    class Boom:
        def to_csv(self, index=False):
            raise KeyboardInterrupt  # interrupted while producing the new contents

    with pytest.raises(KeyboardInterrupt):
        data.save_csv(Boom(), f)
    assert f.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["field.csv"]


def test_atomic_write_interrupted_during_write(tmp_path, monkeypatch):
    f = tmp_path / "env.json"
    data.atomic_write_text(f, "old")

    def broken_replace(a, b):
        raise OSError("disk gone")
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        data.atomic_write_text(f, "new")
    assert f.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_merge_replaces_same_key_keeps_rest(tmp_path):
    f = tmp_path / "field.csv"
    key = ["op", "impl", "view"]
    data.merge_csv(pd.concat([_rows(), _rows(impl="triton", value=9.0)]), f, key)
    data.merge_csv(_rows(value=2.5), f, key)
    back = mage.load(f).set_index("impl")["value"]
    assert back["pytorch"] == 2.5 and back["triton"] == 9.0


def test_environment_by_run(tmp_path):
    data.add_environment(tmp_path, "r1", {"gpu": "x"})
    data.add_environment(tmp_path, "r2", {"gpu": "y"})
    assert json.loads((tmp_path / "environment.json").read_text()) == {"r1": {"gpu": "x"}, "r2": {"gpu": "y"}}


def test_published_rtx4090_is_labelled():
    df = mage.load(__import__("pathlib").Path(__file__).resolve().parents[1] / "data/rtx4090-published")
    assert set(df["shape_set"]) == {"published"} and df["source"].str.startswith("published").all()
    assert len(df) == 45


@pytest.mark.parametrize("bad,msg", [
    (dict(round="one"), r"x.csv: row 3: round 'one' is not a whole number"),
    (dict(round=1.5), r"x.csv: row 3: round '1.5' is not a whole number"),
    (dict(floor_us="many"), r"x.csv: row 3: floor_us .many. is not a number"),
    (dict(op=""), r"x.csv: row 3: op is empty"),
])
def test_parse_problems_name_file_and_row(tmp_path, bad, msg):
    data.save_csv(pd.concat([_rows(flops=1.0), _rows(view="launches", unit="count", value=1.0, flops=1.0, **bad)]),
                  tmp_path / "x.csv")
    with pytest.raises(DataError, match=msg):
        mage.load(tmp_path)


def test_duplicated_rows_are_refused_naming_file_and_key(tmp_path):
    data.save_csv(pd.concat([_rows(), _rows(value=2.0)]), tmp_path / "field.csv")
    with pytest.raises(DataError, match=r"field.csv: rows 2 and 3 .*matmul.*pytorch.*kernel_time"):
        mage.load(tmp_path)


def test_duplicated_rows_across_files_are_refused(tmp_path):
    data.save_csv(_rows(), tmp_path / "field.csv")
    data.save_csv(_rows(value=2.0), tmp_path / "more.csv")
    with pytest.raises(DataError, match=r"field.csv row 2 and .*more.csv row 2"):
        mage.load(tmp_path)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"r1": 3}'])
def test_corrupt_environment_is_a_clear_error(tmp_path, text):
    (tmp_path / "environment.json").write_text(text)
    with pytest.raises(DataError, match="environment.json"):
        data.load_environment(tmp_path)


def test_machine_names_leave_out_the_memory_size(monkeypatch):
    """An H100's data folder is 'h100', not 'h10080gb' (its name carries '80GB HBM3')."""
    import torch
    from mage import env
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name, want in (("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                       ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA H100 PCIe", "h100")):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda n=name: n)
        assert env.machine_name() == want, name
