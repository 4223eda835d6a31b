"""The book's subcommands: ``targets`` (the speed targets, computed from recorded data) and
``import-published`` (the original note's published figures in mage's schema)."""
from __future__ import annotations

from pathlib import Path

from mage.cli_common import subcommand


def cmd_import_published(a):
    from mage.book.published import import_published
    df = import_published(Path(a.src), Path(a.out))
    print(f"wrote {len(df)} rows to {a.out}")


def cmd_targets(a):
    from mage.book import targets as t
    from mage.data import load
    print(t.markdown(t.targets(a.data)))
    print("\nHarness precision: " + t.precision_summary(load(a.data)))


@subcommand(80)
def add_import_published(sub):
    sp = sub.add_parser("import-published", help="the original note's published figures in mage's schema")
    sp.add_argument("src")
    sp.add_argument("--out", default="data/rtx4090-published")
    sp.set_defaults(fn=cmd_import_published)


@subcommand(90)
def add_targets(sub):
    from mage.book import DEFAULT_DATA
    sp = sub.add_parser("targets", help="the Triton and Rust speed targets, computed from recorded data")
    sp.add_argument("data", nargs="?", default=DEFAULT_DATA)
    sp.set_defaults(fn=cmd_targets)
