"""The rows the harness writes from raw spans, the same for spans it took itself and for spans an
implementation took in its own process (``Impl.own_spans``): per round and overall, host time where
there is one, and the flags computed from the spans."""
from mage.measure import _span_rows
from mage.registry import Impl
from mage.timing import SpanPlan, SpanRounds


def _rows(sp, kernel=None):
    im = Impl(op="matmul", name="own", fn=None, own_spans=lambda *a: None, kernels_of="other")
    row = lambda im, view, value, unit, rnd=0, stat="mean", **extra: dict(  # noqa: E731
        impl=im.name, view=view, value=value, round=rnd, stat=stat, **extra)
    return _span_rows(im, sp, kernel, [], lambda r: [{}, {}], row, kernel_names="k")


def test_raw_spans_from_another_process_become_the_usual_rows():
    plan = SpanPlan.make(n=90, rounds=3, block=10)
    spans = [[10.0 + r] * plan.per_round for r in range(plan.rounds)]
    sp = SpanRounds({"own": spans}, [["own"]] * 3, {"own": [[] for _ in range(3)]}, list(plan.blocks))
    rows = _rows(sp)
    means = {r["round"]: r["value"] for r in rows if r["view"] == "event_span" and r["stat"] == "mean"}
    assert means == {1: 10.0, 2: 11.0, 3: 12.0, 0: 11.0}
    assert not [r for r in rows if r["view"] == "host_time"]  # none given, none written
    overall = [r for r in rows if r["round"] == 0 and r["stat"] == "mean"][0]
    assert overall["kernel_names"] == "k" and "launch_bound" not in overall["flags"]


def test_host_times_when_the_executor_returns_them():
    plan = SpanPlan.make(n=30, rounds=3, block=10)
    sp = SpanRounds({"own": [[5.0] * 10] * 3}, [["own"]] * 3, {"own": [[2.0] * 10] * 3}, list(plan.blocks))
    host = [r for r in _rows(sp) if r["view"] == "host_time"]
    assert [r["round"] for r in host] == [1, 2, 3, 0] and all(r["value"] == 2.0 for r in host)


def test_a_round_without_host_times_does_not_renumber_the_others():
    plan = SpanPlan.make(n=30, rounds=3, block=10)
    sp = SpanRounds({"own": [[5.0] * 10] * 3}, [["own"]] * 3, {"own": [[], [2.0] * 10, [3.0] * 10]},
                    list(plan.blocks))
    host = {r["round"]: r["value"] for r in _rows(sp) if r["view"] == "host_time"}
    assert host == {2: 2.0, 3: 3.0, 0: 2.5}


def test_a_run_stopped_mid_write_never_leaves_times_without_their_check(tmp_path, monkeypatch):
    # an H200 run cut by its time limit between the two writes kept a case's times but not its checks
    import pandas as pd
    from mage import measure

    written = []

    def merge(df, path, key):
        written.append(path.name)
        if path.name != "checks.csv":
            raise KeyboardInterrupt  # the stop arrives at the first write of times
    monkeypatch.setattr(measure, "merge_csv", merge)
    rows = pd.DataFrame([dict(op="x", shape_set="field", value=1.0)])
    checks = pd.DataFrame([dict(op="x", impl="y", dtype="fp32", shape="n=1", dist="normal", run="r")])
    try:
        measure.write(tmp_path, rows, checks)
    except KeyboardInterrupt:
        pass
    assert written[0] == "checks.csv"
