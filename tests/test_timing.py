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
    sp = spans(calls, n=30, rounds=3, warmup=2, timer=fake_timer, between=rounds_seen.append)
    assert sp.orders == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert [len(r) for r in sp.samples["a"]] == [10, 10, 10]
    assert sp.round_means("b") == [7.0, 7.0, 7.0]
    assert rounds_seen == [1, 2, 3, 4]  # clocks read before every round and after the last
    assert sp.host_means("a") == [1.0, 1.0, 1.0] and sp.host_means("b") == [2.0, 2.0, 2.0]
    # a round warms each implementation in the rotated order, then they take turns span by span
    assert log[:4] == ["a", "a", "b", "b"] and log[4:24] == ["a", "b"] * 10
    assert log[24:28] == ["b", "b", "a", "a"] and log[28:48] == ["b", "a"] * 10


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
