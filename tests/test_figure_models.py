"""The model chapter's figure and its data: a model's rows come from the folder (the book's own or another
machine's beside it, named) holding its newest complete run; values at one shape when a run measured two."""
from __future__ import annotations

import pandas as pd

from mage.book import figure_models as FM


def _rows(op, run, shapes=("atoms=1000,edges=10", "atoms=3000,edges=30"), predicted=True, dtype="fp32"):
    """A run's rows at each shape; a complete run ends with Amdahl's prediction."""
    return pd.DataFrame([dict(op=op, impl=i, dtype=dtype, shape=s, view=v, stat=st, round=0, stage=None,
                              value=float(n) * (2 if i == "swapped" else 1), run=run)
                         for n, s in enumerate(shapes, 1) for i in ("stock", "swapped")
                         for v, st in (("kernel_time", "mean"), ("launches", "mean"), ("event_span", "mean"),
                                       ("kernel_time", "predicted"))
                         if st == "mean" or (predicted and i == "swapped")])


def _write(folder, rows):
    (folder / "models").mkdir(parents=True)
    rows.to_csv(folder / "models" / "rows.csv", index=False)
    (folder / "rows.csv").write_text("op\n")  # a folder holds data when it has a csv


def _write_more(folder, rows):
    f = folder / "models" / "rows.csv"
    pd.concat([pd.read_csv(f), rows]).to_csv(f, index=False)


def test_values_at_the_shape_asked_and_the_largest_shape():
    rows = _rows("mace", "r1")
    assert FM.largest(rows, "mace") == "atoms=3000,edges=30"
    assert FM.value(rows, "mace", "stock", shape="atoms=1000,edges=10") == 1.0
    assert FM.value(rows, "mace", "swapped", shape="atoms=3000,edges=30") == 4.0
    assert FM.largest(rows, "schnet") is None


def test_a_model_only_another_machine_measured_comes_from_its_folder_named(tmp_path, monkeypatch):
    book_dir, other = tmp_path / "h200", tmp_path / "h100"
    _write(book_dir, _rows("schnet", "20261205T000000Z-h200"))
    _write(other, _rows("mace", "20261205T224813Z-h100"))
    monkeypatch.setenv("MAGE_DATA", str(book_dir))
    monkeypatch.setattr("mage.book.other_machine",
                        lambda name: type("B", (), {"machine": f"NVIDIA {name.upper()}"})())
    rows, machine = FM.rows_for("mace", book_dir, "NVIDIA H200")
    assert machine == "NVIDIA H100" and set(rows["op"]) == {"mace"}
    rows, machine = FM.rows_for("schnet", book_dir, "NVIDIA H200")
    assert machine == "NVIDIA H200" and set(rows["op"]) == {"schnet"}
    # a newer run of a model the book's card measured too comes from the machine that ran it
    _write_more(other, _rows("schnet", "20261206T000000Z-h100"))
    rows, machine = FM.rows_for("schnet", book_dir, "NVIDIA H200")
    assert machine == "NVIDIA H100" and set(rows.loc[rows["op"] == "schnet", "run"]) == {"20261206T000000Z-h100"}
    fig = FM.forward(*FM.rows_for("mace", book_dir, "NVIDIA H200")[:1], "mace", "MACE", "NVIDIA H100",
                     shape="atoms=3000,edges=30")
    assert {t.y[0] for t in fig.data if t.visible} == {2.0, 4.0}


def test_the_folder_whose_stalest_case_is_newest_wins(tmp_path, monkeypatch):
    """One machine re-ran a model at bf16 today and holds its FP32 case from yesterday's code; the other ran
    both precisions this morning: the page reads both from the second, not yesterday's FP32 beside today's
    bf16 (the old rule took the folder holding the newest run of any case)."""
    book_dir, other = tmp_path / "h200", tmp_path / "h100"
    _write(book_dir, pd.concat([_rows("vjepa2_encoder", "20261205T180000Z-h200"),
                                _rows("vjepa2_encoder", "20261206T072000Z-h200", dtype="bf16")]))
    _write(other, pd.concat([_rows("vjepa2_encoder", "20261206T064600Z-h100", dtype=dt) for dt in ("fp32", "bf16")]))
    monkeypatch.setattr("mage.book.other_machine",
                        lambda name: type("B", (), {"machine": f"NVIDIA {name.upper()}"})())
    rows, machine = FM.rows_for("vjepa2_encoder", book_dir, "NVIDIA H200")
    assert machine == "NVIDIA H100" and set(rows["run"]) == {"20261206T064600Z-h100"}
    # once the book's card has run FP32 on today's code too, its folder wins
    _write_more(book_dir, _rows("vjepa2_encoder", "20261206T080000Z-h200"))
    rows, machine = FM.rows_for("vjepa2_encoder", book_dir, "NVIDIA H200")
    assert machine == "NVIDIA H200" and set(rows["run"]) == {"20261206T072000Z-h200", "20261206T080000Z-h200"}


def test_a_run_cut_before_its_end_is_never_shown_or_mixed(tmp_path):
    """Each column is saved as it finishes; a run ends with Amdahl's prediction. A newer run cut after its
    eager columns must not lend them to the older complete run's figure."""
    done = _rows("mace", "20261205T000000Z-h100")
    cut = _rows("mace", "20261206T000000Z-h100", predicted=False).assign(value=100.0)
    _write(tmp_path, pd.concat([done, cut]))
    rows = FM.load(tmp_path)
    assert set(rows["run"]) == {"20261205T000000Z-h100"}
    assert FM.value(rows, "mace", "stock", shape="atoms=1000,edges=10") == 1.0


def test_a_run_with_a_failed_column_is_never_shown(tmp_path):
    """A run can reach its prediction with a column that failed (the compiled model did not run): its
    figure would lack that column, so the older complete run stands. The package's own fast road failing
    (MACE's accelerated column) does not make a run incomplete."""
    old, new = "20261205T000000Z-h100", "20261206T000000Z-h100"
    _write(tmp_path, pd.concat([_rows("mace", old), _rows("mace", new).assign(value=100.0)]))
    check = dict(op="mace", dtype="fp32", shape="atoms=1000,edges=10", dist="normal", error=0.0, tolerance=1e-4,
                 trials=1, reason="")
    checks = [dict(check, impl="stock", passed=True, run=new), dict(check, impl="accelerated", passed=False, run=new)]
    pd.DataFrame(checks).to_csv(tmp_path / "models" / "checks.csv", index=False)
    assert set(FM.load(tmp_path)["run"]) == {new}
    checks.append(dict(check, impl="swapped_compile", passed=False, error=float("nan"), run=new))
    pd.DataFrame(checks).to_csv(tmp_path / "models" / "checks.csv", index=False)
    rows = FM.load(tmp_path)
    assert set(rows.loc[rows["shape"] == "atoms=1000,edges=10", "run"]) == {old}
    assert set(rows.loc[rows["shape"] == "atoms=3000,edges=30", "run"]) == {new}  # that case's columns all passed


def test_an_empty_folder_gives_rows_a_figure_can_ask_of(tmp_path):
    rows = FM.load(tmp_path)
    assert FM.largest(rows, "mace") is None and FM.value(rows, "mace", "stock") != FM.value(rows, "mace", "stock")


def test_units_a_second_of_kernel_time():
    rows = _rows("vjepa2_encoder", "r1", shapes=("frames=16,tokens=2048,batch=1",))
    assert FM.per_second(rows, "vjepa2_encoder", "stock", "tokens") == 2048 / 1e-6  # 1 us a call
    assert FM.per_second(rows, "vjepa2_encoder", "swapped", "tokens") == 2048 / 2e-6


def test_counts_a_shape_names():
    assert FM.count("atoms=3000,edges=251692,cutoff=6.0") == 3000
    assert FM.count("atoms=3000,edges=251692,cutoff=6.0", "edges") == 251692
    assert FM.count("frames=16,tokens=2048,batch=1", "tokens") == 2048
