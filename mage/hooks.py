"""The measurement's extension point: the ``pass`` of a timed call. ``forward`` (the implementation's
own call) is the core's; an extension adds others (``add_pass``) with a hook that the one loop
(``mage.measure``) asks what to admit, what to call, what it costs and how to replay it.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol

from .errors import MageInputError
from .timing import graph_span

FORWARD = "forward"
FORWARD_HELP = "forward (the call)"
DEFAULT = (FORWARD,)


class PassHook(Protocol):
    """What an extension's passes answer; one hook may serve several passes (it is asked once per run
    and once per case, not once per pass)."""

    def start(self, passes: tuple) -> None:
        """Before anything of a run is compiled or timed."""

    def admit(self, impl, shape: dict, st, log: Callable, checks: list) -> bool:
        """Whether ``impl`` (its forward check passed) is timed in these passes at ``shape``; appends
        the check rows it made to ``checks`` and logs why not."""

    def calls(self, impl, arg_sets: list, pass_: str, seed: int) -> list:
        """One zero-argument callable per prepared input set, each one call of ``pass_``."""

    def cost(self, spec, shape: dict, dtype: str, probe, pass_: str) -> tuple:
        """(FLOPs, compulsory bytes) of one call of ``pass_``."""

    def graph_us(self, one_set: list, impl, arg_sets: list, pass_: str, seed: int, kernel_us: float,
                 repeat: int) -> float:
        """Microseconds per call replayed from a CUDA graph."""

    def protocol(self) -> dict:
        """What a call of these passes is, for the run's recorded protocol."""


_PASSES: dict[str, tuple] = {}  # name -> (hook, help words), in the order they were added


def add_pass(name: str, hook: PassHook, help: str) -> None:
    """Register pass ``name`` (``help``: how ``--passes`` describes it)."""
    _PASSES[name] = (hook, help)


def names() -> tuple:
    """Every pass, the core's first: the canonical order of a run's passes."""
    return (FORWARD, *_PASSES)


def help_text() -> str:
    return ", ".join([FORWARD_HELP] + [h for _, h in _PASSES.values()])


def hook(name: str) -> Optional[PassHook]:
    """The hook of an extension's pass; None for forward."""
    return _PASSES[name][0] if name in _PASSES else None


def hooks(passes) -> list:
    """The distinct hooks of ``passes``, in pass order."""
    return list(dict.fromkeys(hook(p) for p in passes if p in _PASSES))


def check_passes(passes, where: str = "measure") -> tuple:
    """The passes asked for, in their canonical order; an unknown one names the option."""
    passes = tuple(passes or DEFAULT)
    bad = [p for p in passes if p not in names()]
    if bad or not passes:
        raise MageInputError(where, "--passes", f"must be among {list(names())}, got {list(passes)}")
    return tuple(p for p in names() if p in passes)


def cost(spec, shape, dtype, probe, pass_):
    """(FLOPs, bytes) of one call of ``pass_``: forward's is the spec's."""
    if pass_ == FORWARD:
        return spec.cost(shape, dtype, inputs=probe)
    return hook(pass_).cost(spec, shape, dtype, probe, pass_)


def graph_us(one_set, impl, arg_sets, pass_, seed, kernel_us, repeat):
    """Microseconds per call of one pass replayed from a CUDA graph (``timing.graph_span``)."""
    if pass_ == FORWARD:
        return graph_span(one_set, replays=20 if kernel_us < 1000 else 5, repeat=repeat)
    return hook(pass_).graph_us(one_set, impl, arg_sets, pass_, seed, kernel_us, repeat)


def cycling(calls: list):
    """One zero-argument call walking through a pass's calls (one per input set), one per call."""
    if len(calls) == 1:
        return calls[0]
    state = {"i": 0}

    def call():
        i = state["i"]
        state["i"] = (i + 1) % len(calls)
        return calls[i]()

    return call


def protocol() -> dict:
    """What each extension's passes are, for a run's recorded protocol."""
    out = {}
    for h in hooks(names()):
        out.update(h.protocol())
    return out
