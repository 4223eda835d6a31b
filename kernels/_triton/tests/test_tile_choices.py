"""The tiles every Triton launcher runs, against a record made before tiles were named and chosen by
a rule (commit 687db0f, when launchers still asked which benchmark shape set a shape belonged to): the
same config at every spec shape (every shape set, and the awkward ones), for every precision, inside
the block launchers too, and the same tile sweeps in the same order.
"""
import importlib
import json
from pathlib import Path

import pytest

from mage import ops, registry
from mage.errors import MageInputError

from kernels._triton import TileTable

RECORD = json.loads((Path(__file__).parent / "tile_choices.json").read_text())
CONFIGS = RECORD["configs"]  # the record's own ids for distinct configs (no launcher list position)


def _module(op):
    """The op's Triton launcher module; None for an operation with no Triton column (no tiles)."""
    for leaf in ("triton_kernel", "triton_block"):
        try:
            return importlib.import_module(f"kernels.{op}.{leaf}")
        except ModuleNotFoundError as e:
            if e.name != f"kernels.{op}.{leaf}":
                raise
    return None


def _chooser(op, dtype):
    """The launcher's own choice at ``dtype``: (sizes, overrides) -> config."""
    m = _module(op)
    if op == "mlp_block":
        return lambda sizes, overrides: m._config(overrides, dtype)
    table = m.TILES[dtype] if isinstance(m.TILES, dict) else m.TILES
    return table.choose


def _tables():
    """Every tile table of every launcher."""
    for op in ops.OPS:
        tiles = getattr(_module(op), "TILES", None) if _module(op) else None
        for dtype, table in (tiles.items() if isinstance(tiles, dict) else [("all", tiles)]):
            if isinstance(table, TileTable):
                yield f"{op}/{dtype}", table


def test_every_spec_shape_gets_the_recorded_config():
    impls = {(i.op, i.dtype): i for i in registry.impls() if i.name == "triton"}
    wrong = [(e["op"], e["dtype"], e["shape"]) for e in RECORD["configs_at"]
             if impls[e["op"], e["dtype"]].config_at(e["shape"]) != CONFIGS[e["config"]]]
    assert not wrong, wrong[:5]


def test_every_launcher_choice_is_the_recorded_one():
    # each launcher at its own sizes, and at the sizes and overrides the blocks call it with
    wrong = [e for e in RECORD["launcher_choices"]
             if _chooser(e["launcher"], e["dtype"])(e["sizes"], e["overrides"]) != CONFIGS[e["config"]]]
    assert not wrong, wrong[:5]


def test_variants_complete_a_config_as_recorded():
    impls = {(i.op, i.dtype): i for i in registry.impls() if i.name == "triton"}
    for e in RECORD["variants"]:
        impl = impls[e["op"], e["dtype"]]
        if "refused" in e:
            with pytest.raises(MageInputError):
                impl.variant(**e["overrides"])
        else:
            assert impl.variant(**e["overrides"]).config == CONFIGS[e["config"]], e


def test_tile_sweeps_keep_their_order_and_content():
    # recorded rows (tiles.csv) and the tile explorer read the sweep's configs in this order
    got = {f"{i.op}/{i.dtype}": list(i.sweep) for i in registry.impls() if i.name == "triton"}
    assert got == {k: [CONFIGS[c] for c in v] for k, v in RECORD["sweeps"].items()}


def test_defaults_are_names_in_their_table():
    # A default is a name: inserting a config into a table (the mutation that once shifted a
    # positional default silently) changes no choice, and a default naming nothing fails at import.
    for where, table in _tables():
        names = [table.base] + [n for n, _ in table.rule] + list(table.sweep)
        assert set(names) <= set(table.configs), where
        assert len(table.configs) == len({json.dumps(c, sort_keys=True) for c in table.configs.values()}), where
        before = {n: table[n] for n in names}
        bigger = TileTable(table.op, {"inserted": dict(table[table.base], num_warps=1), **table.configs},
                           table.base, table.rule)
        assert {n: bigger[n] for n in names} == before, where
    with pytest.raises(KeyError):
        TileTable("op", {"a": {}}, base="b")


@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_random_and_awkward_shapes_get_a_config_of_the_table(op):
    # Any sizes get a whole config of the table (the rule has no gaps), whatever set they are in.
    spec = ops.OPS[op]
    for impl in [i for i in registry.impls(op) if i.name == "triton"]:
        known = [set(c) for c in impl.sweep]
        for shape in spec.random_shapes(30, seed=5) + list(spec.awkward):
            cfg = impl.config_at(shape)
            assert cfg in [dict(c) for c in impl.sweep] or set(cfg) in known, (op, impl.dtype, shape, cfg)
