"""The facet table: what the book and the experiments know of an operation beyond its mathematics (its
label, its marker, its speed targets, how its requests batch, a block's parts ...). Each operation
folder's ``facets.py`` declares its own, and readers ask ``of(op).label`` or ``get(op, key, default)``.
Implementations have a table of their own, by name across operations (``declare_column``, ``column``):
how a column is shown (label, colour, position), declared where the kernel packages register them.

The table names no facet and no experiment: whoever reads a key owns its meaning and its default.
Discovery (``mage.registry.discover_specs``) imports a folder's ``facets.py`` after every ``spec.py``,
so a facets module may import any spec, and its implementations' modules inside functions.
"""
from __future__ import annotations

from typing import Any

from .errors import MageInputError

_TABLE: dict[str, dict[str, Any]] = {}
# The spec table, handed over by ``mage.ops`` when it is made (``bind``): this module imports nothing of
# the core's, so the spec table may read facets while it sorts itself.
_SPECS: Any = {}


def bind(specs) -> None:
    """The table of discovered specs that ``of`` checks a name against (``mage.ops.OPS``)."""
    global _SPECS
    _SPECS = specs
_COLUMNS: dict[str, dict[str, Any]] = {}  # implementation name -> its facets
_REQUIRED = object()


def declare(op: str, **facets) -> None:
    """Declare facets of ``op`` (by name): ``declare("layernorm", label="LayerNorm", order=30)``. A later
    call adds keys or replaces them (an extension may add its own keys to an operation's)."""
    if not isinstance(op, str) or not op:
        raise MageInputError("facets", "op", f"must be an operation's name, got {op!r}")
    _TABLE.setdefault(op, {}).update(facets)


def declared(op: str, key: str, default: Any = None) -> Any:
    """The value declared so far, with no discovery and no checks: for the spec table itself (its sorting
    while discovery runs, a spec's own methods). Everyone else reads through ``of`` or ``get``."""
    return _TABLE.get(op, {}).get(key, default)


def _name(op) -> str:
    return op if isinstance(op, str) else getattr(op, "name", str(op))


class Facets:
    """One operation's facets, read as attributes; a missing one is an error naming both."""

    def __init__(self, op: str, values: dict):
        self._op, self._values = op, values

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return self.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def get(self, key: str, default: Any = _REQUIRED) -> Any:
        if key in self._values:
            return self._values[key]
        if default is _REQUIRED:
            have = ", ".join(sorted(self._values)) or "none"
            raise MageInputError(self._op, key, f"is not among the operation's facets (its facets.py declares: {have})")
        return default

    def keys(self) -> list[str]:
        return sorted(self._values)


def of(op) -> Facets:
    """The facets of ``op`` (a name or a spec). An operation neither discovered nor declared is refused."""
    name = _name(op)
    if name not in _SPECS and name not in _TABLE:  # the membership test runs discovery first
        raise MageInputError("facets", "op", f"must be one of {sorted(set(_SPECS) | set(_TABLE))}, got {name!r}")
    return Facets(name, _TABLE.get(name, {}))


def get(op, key: str, default: Any = _REQUIRED) -> Any:
    """``of(op).get(key, default)``: without a default, a facet ``op`` does not declare is refused."""
    return of(op).get(key, default)



def declare_column(impl: str, **facets) -> None:
    """Declare facets of the implementation named ``impl`` (every operation's column of that name):
    ``declare_column("triton", label="Triton", order=10, color="#E69F00")``."""
    if not isinstance(impl, str) or not impl:
        raise MageInputError("facets", "impl", f"must be an implementation's name, got {impl!r}")
    _COLUMNS.setdefault(impl, {}).update(facets)


def column(impl: str) -> Facets:
    """The facets of the implementation named ``impl``; a name no kernel package declared is refused."""
    if impl not in _COLUMNS:
        raise MageInputError("facets", "impl", f"must be one of {sorted(_COLUMNS)}, got {impl!r}")
    return Facets(impl, _COLUMNS[impl])


def column_declared(impl: str, key: str, default: Any = None) -> Any:
    """``declared`` for implementations: no checks, for the registry's column order."""
    return _COLUMNS.get(impl, {}).get(key, default)
