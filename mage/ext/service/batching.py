"""How a block's requests batch when it is served (its ``batch`` facet): the service experiment's view
of an operation, declared in the operation's ``facets.py``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Batching:
    """How requests to a block batch, for the service experiment (``mage.ext.service``).

    One request is the spec's inputs at a shape whose ``size`` entry is ``items`` (a sequence of tokens,
    a complex, a graph). The inputs named in ``axes`` belong to the request; every other input is a
    weight shared by all requests, resident on the device. Three ways to put requests together:

    - concatenate (the default): the spec's inputs at ``size = B * items`` are B requests side by side
      along the given axes, and the output's requests lie along ``out_axis`` (tokens of a transformer);
    - ``stack``: every request has the same shape and B of them lie on a new leading axis of each
      argument in ``axes`` (axis 0) and of the output (complexes cropped to one size): the block's
      implementations take that leading batch axis;
    - ``join``: the spec says how (a disjoint union of graphs, whose indices shift by the nodes before
      them). ``join(pool, pinned)`` takes every request's own values ({argument index: value}, on the
      host, drawn at the request shape) and returns them ready in host memory (pinned or not), each
      request of one layout (so a batch of B of them always has one shape); ``join.batch(requests,
      slots, device, non_blocking)`` returns the batch's values of the ``axes`` arguments ({index:
      value}) on ``device``: the requests' values copied into the first ``len(requests)`` of ``slots``
      request slots of memory it keeps per ``slots``, the other slots holding earlier requests (the
      padding). The output's requests lie along ``out_axis``, each of the same size.

    ``count(shape)`` is how many items (tokens, pairs, nodes) one request at ``shape`` holds, for
    throughput in items per second; by default ``shape[size]``."""

    size: str  # the shape entry that sets one request's size ('T': tokens)
    axes: dict  # {argument name: the axis requests are stacked along}; the other arguments are weights
    out_axis: int = 0
    items: int = 1  # the request's ``size`` entry unless the command says otherwise
    # arguments that grow with the batch but do not travel with a request: built on the device once per
    # batch size and kept there (a graph's structure), so the transfers leave them out
    resident: tuple = ()
    stack: bool = False
    join: Optional[object] = None
    count: Optional[Callable] = None

    @property
    def mode(self) -> str:
        return "join" if self.join is not None else "stack" if self.stack else "concat"

    def items_in(self, shape: dict) -> int:
        """Items one request at ``shape`` holds."""
        return int(self.count(shape)) if self.count else int(shape[self.size])
