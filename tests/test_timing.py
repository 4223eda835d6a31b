"""Round rotation, statistics and the span protocol, with a fake timer instead of a GPU."""
import pytest

from mage.timing import rotation, spans, summarize


def test_rotation_puts_each_first_once():
    order = rotation(["a", "b", "c"], 3)
    assert order == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert [r[0] for r in order] == ["a", "b", "c"]


def test_summarize_statistics():
    s = summarize([float(x) for x in range(1, 11)])
    assert s["n"] == 10 and s["mean"] == 5.5 and s["median"] == 5.5 and s["min"] == 1 and s["max"] == 10
    assert s["p10"] == pytest.approx(1.9) and s["p90"] == pytest.approx(9.1)
    assert s["outliers"] == 0


def test_outliers_are_flagged_not_dropped():
    s = summarize([10.0] * 99 + [1000.0])
    assert s["outliers"] == 1 and s["n"] == 100 and s["max"] == 1000.0


def test_spans_protocol_with_fake_timer():
    log = []

    def fake_timer(fn):
        fn()
        fake_timer.last_host_us = {"a": 1.0, "b": 2.0}[log[-1]]
        return {"a": 5.0, "b": 7.0}[log[-1]]

    calls = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    rounds_seen = []
    sp = spans(calls, n=30, rounds=3, warmup=2, timer=fake_timer, between=rounds_seen.append, block=4)
    assert sp.orders == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert [len(r) for r in sp.samples["a"]] == [10, 10, 10]
    assert sp.round_means("b") == [7.0, 7.0, 7.0]
    # blocks of 4, 4 and 2 passes per round, the rounds forwards then backwards; clocks before each block
    assert sp.blocks == [(0, 4), (1, 4), (2, 4), (2, 4), (1, 4), (0, 4), (0, 2), (1, 2), (2, 2)]
    assert rounds_seen == [1, 2, 3, 3, 2, 1, 1, 2, 3, 0]
    assert sp.round_window(0) == (0, 7) and sp.round_window(2) == (2, 9)
    assert sp.host_means("a") == [1.0, 1.0, 1.0] and sp.host_means("b") == [2.0, 2.0, 2.0]
    # each implementation warms once, all take 4 untimed turns (the lead-in), then the timed blocks,
    # turn by turn in their round's order
    assert log[:4] == ["a", "a", "b", "b"] and log[4:12] == ["a", "b"] * 4
    assert log[12:20] == ["a", "b"] * 4 and log[20:28] == ["b", "a"] * 4 and log[28:36] == ["a", "b"] * 4
    assert len(log) == 4 + 8 + 60


def test_schedule_spreads_every_round_over_the_window():
    from mage.timing import schedule
    blocks = schedule(3, 100, 10)
    assert len(blocks) == 30 and all(k == 10 for _, k in blocks)
    assert [r for r, _ in blocks[:9]] == [0, 1, 2, 2, 1, 0, 0, 1, 2]
    # a steady trend falls alike on every round: the mean block position is the same for all three
    pos = {r: [i for i, (b, _) in enumerate(blocks) if b == r] for r in range(3)}
    assert len({sum(p) / len(p) for p in pos.values()}) == 1
    assert schedule(2, 5, 10) == [(0, 5), (1, 5)] and schedule(1, 3, 0) == [(0, 1)] * 3


def test_slow_spell_reaches_all_rounds_and_shows_in_time_order():
    """A host that is slow for the middle third of the window: the round means stay close, and the
    thirds in time order show the drift (which the harness flags)."""
    count = {"k": 0}
    lead = 10  # untimed turns before the spans

    def timer(fn):
        k = count["k"] - lead
        count["k"] += 1
        timer.last_host_us = 40.0 if 100 <= k < 200 else 20.0
        return 300.0 + timer.last_host_us

    sp = spans({"a": lambda: None}, n=300, rounds=3, warmup=0, timer=timer)
    means = sp.round_means("a")
    assert max(means) - min(means) < 0.02 * 320
    assert sp.segment_medians("a") == [320.0, 340.0, 320.0]
    assert sp.segment_medians("a", host=True) == [20.0, 40.0, 20.0]
    assert sp.in_time_order("a")[100] == 340.0 and sp.in_time_order("a")[99] == 320.0
    # too few spans for a third to say anything: no drift is computed
    assert spans({"a": lambda: None}, n=60, rounds=3, warmup=0, timer=timer).segment_medians("a") == []


def test_a_few_slow_spans_are_not_drift():
    count = {"k": 0}

    def timer(fn):
        count["k"] += 1
        return 1000.0 if count["k"] in (20, 21, 22) else 100.0

    sp = spans({"a": lambda: None}, n=300, rounds=3, warmup=0, timer=timer)
    assert sp.segment_medians("a") == [100.0, 100.0, 100.0]


def test_span_rounds_without_host_times():
    from mage.timing import SpanRounds
    sp = SpanRounds({"a": [[1.0, 2.0], [3.0, 4.0]]}, [["a"], ["a"]], {"a": [[], []]}, [(0, 2), (1, 2)])
    assert sp.in_time_order("a") == [1.0, 2.0, 3.0, 4.0] and sp.round_window(1) == (1, 2)
    assert sp.in_time_order("a", host=True) == [] and sp.segment_medians("a", host=True) == []


def test_garbage_collector_is_off_inside_spans_only():
    import gc
    seen = []
    spans({"a": lambda: seen.append(gc.isenabled())}, n=3, rounds=3, warmup=1, timer=lambda fn: fn() or 1.0)
    assert seen[0] is True and seen[1:] == [False] * 4 and gc.isenabled()  # warm-up, lead-in, 3 spans


def test_clock_warnings():
    from mage.env import clock_warnings
    assert clock_warnings([{"sm_mhz": 1980, "throttle": 1}, {"sm_mhz": 1980, "throttle": 0}]) == []
    flags = clock_warnings([{"sm_mhz": 1980, "throttle": 0}, {"sm_mhz": 1500, "throttle": 0x4}])
    assert flags == ["clocks_moved:1500-1980MHz", "throttled"]


def test_cold_input_sets_advance_across_implementations_taking_turns():
    from mage.measure import _cycling
    seen, turn = [], {"i": 0}
    a = _cycling(lambda s: seen.append(("a", s)), [(0,), (1,), (2,)], turn)
    b = _cycling(lambda s: seen.append(("b", s)), [(0,), (1,), (2,)], turn)
    for _ in range(2):
        a(), b()
    # b never reads the set a has just read (it would find it in L2)
    assert seen == [("a", 0), ("b", 1), ("a", 2), ("b", 0)]


def test_spans_execute_the_plan_they_are_given():
    # The protocol is written once (SpanPlan); this path and an implementation that times itself in its
    # own process (rust_native) both execute it. Here: the round of every timed pass, in time order.
    from mage.timing import SpanPlan
    plan = SpanPlan.make(n=90, rounds=3, block=4, warmup=2)
    seen, current = [], {"r": -1}  # -1: the untimed lead-in, before the first block
    timer = lambda fn: seen.append(current["r"]) or 1.0  # noqa: E731
    spans({"a": lambda: None}, plan=plan, timer=timer, between=lambda r: current.update(r=r - 1))
    assert seen == [-1] * plan.lead_in + plan.round_sequence() and len(plan.round_sequence()) == 90
