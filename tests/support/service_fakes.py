"""A clock and an executor for the service loops (``mage.ext.service.loops``) with no GPU and no waiting:
the clock moves only when told to, the executor serves a batch in a stated number of the clock's seconds."""
from __future__ import annotations

from typing import Callable

from mage.ext.service.loops import PARTS


class FakeClock:
    """A clock that moves only when told to (``advance``) or waited on (``sleep_until``)."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeExecutor:
    """Serves a batch of b requests in ``cost(b)`` seconds of the fake clock, split into parts by
    ``shares``; records every batch it was given."""

    def __init__(self, clock: FakeClock, cost: Callable[[int], float], shares=(0.25, 0.5, 0.25)):
        self.clock, self.cost, self.shares, self.batches = clock, cost, shares, []

    def run(self, requests: list[int]) -> dict:
        self.batches.append(list(requests))
        dt = self.cost(len(requests))
        self.clock.advance(dt)
        return {p: s * dt for p, s in zip(PARTS, self.shares)}
