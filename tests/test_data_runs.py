"""Data that is never lost or mixed: every run's rows kept and selected one run at a time, merges from two
processes at once, file modes, and a data folder that belongs to one machine."""
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from mage import data, measure
from mage.data import DataError
from tests.support.mage_cli import mage as _mage

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _rows(run, value, **over):
    r = dict(op="matmul", impl="pytorch", dtype="fp32", shape="M=2,K=2,N=2", shape_set="field", cache="warm",
             view="kernel_time", round=0, stat="mean", value=value, unit="us", run=run)
    r.update(over)
    return pd.DataFrame([r])


R1, R2 = "20261201T000000Z-h200", "20261202T000000Z-h200"


def test_a_second_run_keeps_the_first_runs_rows(tmp_path):
    measure.write(tmp_path, pd.concat([_rows(R1, 1.0), _rows(R1, 5.0, impl="triton")]), pd.DataFrame())
    measure.write(tmp_path, _rows(R2, 2.0), pd.DataFrame())
    every = data.load(tmp_path, run="all")
    assert sorted(zip(every["run"], every["impl"], every["value"])) == [
        (R1, "pytorch", 1.0), (R1, "triton", 5.0), (R2, "pytorch", 2.0)]


def test_a_rerun_within_one_run_still_replaces_its_own_rows(tmp_path):
    measure.write(tmp_path, _rows(R1, 1.0), pd.DataFrame())
    measure.write(tmp_path, _rows(R1, 3.0), pd.DataFrame())
    assert data.load(tmp_path, run="all")["value"].tolist() == [3.0]


def test_checks_of_two_runs_are_both_kept_and_the_latest_is_the_default(tmp_path):
    check = dict(op="matmul", impl="triton", dtype="fp32", shape="M=2,K=2,N=2", dist="normal", error=0.0,
                 tolerance=1e-5, trials=2, reason="")
    measure.write(tmp_path, pd.DataFrame(), pd.DataFrame([dict(check, passed=False, run=R1)]))
    measure.write(tmp_path, pd.DataFrame(), pd.DataFrame([dict(check, passed=True, run=R2)]))
    assert len(data.load_checks(tmp_path, run="all")) == 2
    latest = data.load_checks(tmp_path)
    assert latest["run"].tolist() == [R2] and latest["passed"].tolist() == [True]


def test_load_takes_the_latest_run_of_each_case_by_default(tmp_path):
    # run 2 measured only pytorch: triton's case comes from run 1, pytorch's from run 2, never both
    df = pd.concat([_rows(R1, 1.0), _rows(R1, 5.0, impl="triton"), _rows(R2, 2.0)])
    data.save_csv(df, tmp_path / "field.csv")
    got = data.load(tmp_path).set_index("impl")
    assert got.loc["pytorch", "value"] == 2.0 and got.loc["triton", "run"] == R1 and len(got) == 2
    assert data.load(tmp_path, run=R1)["value"].tolist() == [1.0, 5.0]
    with pytest.raises(DataError, match="no rows of run 'nope'"):
        data.load(tmp_path, run="nope")


def test_a_later_run_that_records_its_config_differently_still_replaces_the_case(tmp_path):
    # A retuned default (or a config recorded more exactly) must not leave the earlier run's number
    # beside the new one: outside the tile sweep the config describes a case, it does not name one.
    df = pd.concat([_rows(R1, 1.0, impl="triton", config='{"BLOCK": 64}'),
                    _rows(R2, 2.0, impl="triton", config='{"BLOCK": 128}'),
                    _rows(R1, 7.0, impl="triton", config='{"BLOCK": 64}', shape_set="tiles", tile_of="field"),
                    _rows(R2, 8.0, impl="triton", config='{"BLOCK": 128}', shape_set="tiles", tile_of="field")])
    data.save_csv(df, tmp_path / "field.csv")
    got = data.load(tmp_path)
    assert got[got["shape_set"] == "field"]["value"].tolist() == [2.0]
    assert sorted(got[got["shape_set"] == "tiles"]["value"]) == [7.0, 8.0]  # two configs, two cases


def test_run_order_is_by_time_not_by_spelling(tmp_path):
    # a run id without a timestamp (an old check run) is older than any timestamped run
    df = pd.concat([_rows("check-cpu", 1.0), _rows(R1, 2.0)])
    data.save_csv(df, tmp_path / "field.csv")
    assert data.load(tmp_path)["run"].tolist() == [R1]


_WRITER = textwrap.dedent("""
    import sys, time, pandas as pd
    from pathlib import Path
    from mage import data
    out, who, start = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    while not start.exists():
        time.sleep(0.005)
    for i in range(150):
        row = dict(op="matmul", impl=who, dtype="fp32", shape="M=2,K=2,N=2", shape_set="field", cache="warm",
                   view="kernel_time", round=i, stat="mean", value=float(i), unit="us", run="r")
        data.merge_csv(pd.DataFrame([row]), out, ["op", "impl", "dtype", "shape", "cache", "view", "round",
                                                  "stat", "run"])
""")


def test_two_processes_merging_at_once_lose_nothing(tmp_path):
    out, start = tmp_path / "field.csv", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(out), who, str(start)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
    start.touch()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    got = pd.read_csv(out)
    assert len(got) == 300 and sorted(got.groupby("impl").size().tolist()) == [150, 150]


def test_new_files_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        data.save_csv(_rows(R1, 1.0), tmp_path / "field.csv")
        data.add_environment(tmp_path, R1, {"gpu": "x"})
    finally:
        os.umask(old)
    for name in ("field.csv", "environment.json"):
        assert oct((tmp_path / name).stat().st_mode & 0o777) == oct(0o644), name


def test_rewriting_keeps_the_files_mode(tmp_path):
    f = tmp_path / "field.csv"
    data.save_csv(_rows(R1, 1.0), f)
    f.chmod(0o664)
    data.merge_csv(_rows(R2, 1.0), f, ["run"])
    assert oct(f.stat().st_mode & 0o777) == oct(0o664)


def test_a_folder_of_another_machine_is_refused(tmp_path):
    data.add_environment(tmp_path, R1, {"gpu": "NVIDIA H200"})
    data.ensure_same_machine(tmp_path, {"gpu": "NVIDIA H200"})  # the same card: fine
    with pytest.raises(DataError, match=r"NVIDIA H200.*this machine.*none.*--force-machine"):
        data.ensure_same_machine(tmp_path, {"gpu": "none"})
    data.ensure_same_machine(tmp_path, {"gpu": "none"}, force=True)
    data.ensure_same_machine(tmp_path / "fresh", {"gpu": "none"})  # a new folder belongs to nobody yet


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CPU machine writing into a GPU folder")
def test_check_out_into_a_gpu_folder_is_refused_on_the_cpu(tmp_path):
    data.add_environment(tmp_path, R1, {"gpu": "NVIDIA H200"})
    before = sorted(p.name for p in tmp_path.iterdir())
    args = ["check", "--ops", "bias_gelu", "--impls", "pytorch", "--trials", "1", "--out", str(tmp_path)]
    r = _mage(*args)
    assert r.returncode == 2 and "--force-machine" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    r = _mage(*args, "--force-machine")
    assert r.returncode == 0, r.stderr
    checks = data.load_checks(tmp_path)
    assert len(checks) and checks["passed"].all()
    assert {e.get("gpu") for e in data.load_environment(tmp_path).values()} == {"NVIDIA H200", "none"}


def test_a_blank_key_cell_read_back_matches_the_blank_it_was_written_as(tmp_path):
    # written as "", read back as NaN: the re-run of the same run must still replace, not duplicate
    f = tmp_path / "field.csv"
    data.merge_csv(_rows(R1, 1.0, config=""), f, measure.KEY + ["config"])
    data.merge_csv(_rows(R1, 2.0, config=""), f, measure.KEY + ["config"])
    assert data.load(f, run="all")["value"].tolist() == [2.0]


def test_two_runs_started_in_one_second_get_two_ids(tmp_path):
    """Run ids are stamped to the second: a second run into the same folder in the same second once got
    the first run's id, and load(run=...) then mixed both runs' rows. It now waits for a free id."""
    from mage.data import add_new_run, load_environment
    clock = iter(["20991231T235959Z-x", "20991231T235959Z-x", "20991231T235959Z-x", "21000101T000000Z-x"])
    first = add_new_run(tmp_path, lambda: "20991231T235959Z-x", {"n": 1})
    second = add_new_run(tmp_path, lambda: next(clock), {"n": 2})
    assert (first, second) == ("20991231T235959Z-x", "21000101T000000Z-x")
    assert load_environment(tmp_path)[first] == {"n": 1} and load_environment(tmp_path)[second] == {"n": 2}


def test_every_file_a_regeneration_note_names_is_kept_or_declared_lost():
    # a device output named in a folder's REGENERATION.md but never committed is found only by reading the
    # notes (five of 12-05 were); this finds it the day it happens. Lost ones are listed, by name, in the
    # note's section "Files named above that are not here"
    import re
    for note in sorted((ROOT / "data").glob("*/REGENERATION.md")):
        text = note.read_text()
        kept, _, lost = text.partition("## Files named above that are not here")
        named = set(re.findall(r"`([\w./-]+\.(?:txt|csv|jsonl|json))`", kept))
        missing = [n for n in sorted(named) if not (note.parent / n).exists()
                   and not any(note.parent.rglob(n.rsplit("/", 1)[-1])) and f"`{n}`" not in lost]
        assert not missing, (note.parent.name, missing)
