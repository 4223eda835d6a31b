"""A launcher's tiles as a table of named configs, the order a tile sweep tries them in, the rule that
picks one from a call's sizes, and the memo of the launcher's plan. Defaults are names, so adding a
config changes no choice; a rule reads sizes only, never which benchmark shape set they come from.
"""
from __future__ import annotations

from typing import Callable

from mage.errors import MageInputError

from .common import split

_MEMO_LIMIT = 1024  # choices and plans kept per table (a tile sweep or a shape fuzz makes a few hundred)


class TileTable:
    """``configs``: name -> config (every key the launcher reads). ``rule``: (name, test) pairs; the
    first whose ``test(sizes)`` holds names the config a call runs, else ``base``, the config tuned
    over the widest range of sizes (also the one a partial override completes). ``sweep``: the names a
    tile sweep tries, the plain one first (default: the whole table, in its order). ``sizes``: the
    names of the sizes a launcher's ``plan`` passes, in its order."""

    def __init__(self, op: str, configs: dict, base: str, rule: tuple = (), sweep=None, sizes: tuple = ()):
        self.op, self.base, self.sizes = op, base, tuple(sizes)
        self.configs = {name: dict(c) for name, c in configs.items()}
        self.rule: tuple[tuple[str, Callable[[dict], bool]], ...] = tuple(rule)
        self.sweep = tuple(self.configs if sweep is None else sweep)
        missing = [n for n in (base, *(n for n, _ in self.rule), *self.sweep) if n not in self.configs]
        if missing:  # a default is a name, checked when the launcher is imported
            raise KeyError(f"{op}: tile names not in its table: {missing}")
        self._memo: dict = {}
        self.plans: dict = {}

    def __getitem__(self, name: str) -> dict:
        return dict(self.configs[name])

    def base_config(self) -> dict:
        """The base config (what runs where no rule holds)."""
        return dict(self.configs[self.base])

    def name_at(self, sizes: dict) -> str:
        """The name of the config the rule picks at ``sizes`` (the keys its tests read)."""
        for name, test in self.rule:
            if test(sizes):
                return name
        return self.base

    def sweep_configs(self) -> tuple:
        """The configs a tile sweep tries, in order (fresh dicts)."""
        return tuple(dict(self.configs[n]) for n in self.sweep)

    def choose(self, sizes: dict, config: dict | None = None) -> dict:
        """The config a call at ``sizes`` runs with: the rule's, overridden by ``config`` (a key the
        chosen config lacks is refused). A fresh dict. Memoised: launchers without a plan memo of
        their own call it on every launch, where host time is most of a small call's time."""
        try:
            memo = (tuple(sizes.items()), tuple(sorted(config.items())) if config else ())
            hit = self._memo.get(memo)
        except TypeError:  # an unhashable value among the overrides: chosen afresh
            memo = hit = None
        if hit is None:
            hit = self._merge(self.configs[self.name_at(sizes)], config)
            if memo is not None:
                if len(self._memo) >= _MEMO_LIMIT:
                    self._memo.clear()
                self._memo[memo] = hit
        return dict(hit)

    def complete(self, config: dict) -> dict:
        """``config`` with its missing keys from the base config (what a variant pinned to it runs)."""
        return self._merge(self.configs[self.base], config)

    def _merge(self, base: dict, config: dict | None) -> dict:
        unknown = set(config or ()) - set(base)
        if unknown:
            raise MageInputError(self.op, "config", f"has unknown keys {sorted(unknown)}; known: {sorted(base)}")
        return {**base, **config} if config else dict(base)

    def plan(self, make, sizes: tuple, config: dict, *extra):
        """``make(consts, launch, *sizes, *extra)``: a launcher's plan (grid, kernel keywords) from the
        config chosen at ``sizes`` (named by ``self.sizes``) with ``config``'s overrides, its kernel
        constants and launch options apart. Memoised on everything it depends on (``extra``: strides, a
        precision road), so a repeated call pays one tuple and one look-up; callers must not change what
        it returns. A refused config raises and is never stored; an unhashable override is planned afresh."""
        try:
            key = (sizes, extra, tuple(config.items()) if config else ())
            hit = self.plans.get(key)
        except TypeError:
            key = hit = None
        if hit is None:
            consts, launch = split(self.choose(dict(zip(self.sizes, sizes)), config))
            hit = make(consts, launch, *sizes, *extra)
            if key is not None:
                if len(self.plans) >= _MEMO_LIMIT:
                    self.plans.clear()
                self.plans[key] = hit
        return hit
