"""Every subcommand answers ``--help`` with the options it has always had, whether the core or an extension
(``mage.ext``) adds it, in the order ``python -m mage --help`` lists them."""
import argparse

import pytest
from tests.support.mage_cli import mage

from mage.__main__ import build_parser

# Each subcommand's options (positionals by name), in --help order: the command line's contract.
OPTIONS = {
    "measure": "--ops --impls --shapes --cache --dtypes --all --tiles --tiles-only --no-pin --iters --spans --rounds "
               "--no-graph --passes --where --out --force-machine",
    "train": "--out --ops --impls --shapes --precisions --steps --iters --no-pin --force-machine",
    "check": "--ops --impls --trials --out --force-machine",
    "launch-path": "--out --ops --impls --shape-set --calls --batches --force-machine",
    "serve": "--out --ops --impls --dtypes --shape-set --items --host --requests --batch --wait-us --loads "
             "--sweep-limit --seed --no-pad --no-pin --force-machine",
    "amdahl": "--out --ops --shapes --dtypes --baseline --custom --iters --no-pin --force-machine",
    "models": "--out --models --frames --atoms --mace-atoms --dtypes --iters --spans --small",
    "ceilings": "--out --force-machine",
    "import-published": "src --out",
    "targets": "data",
    "compare": "old new --views --tol --spread",
    "machine-name": "",
}


def _subparsers() -> dict:
    p = build_parser()
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_the_subcommands_and_their_options():
    got = {name: " ".join(s for a in sp._actions for s in (a.option_strings or [a.dest]) if s not in ("-h", "--help"))
           for name, sp in _subparsers().items()}
    assert list(got) == list(OPTIONS) and got == OPTIONS


@pytest.mark.parametrize("sub", list(OPTIONS))
def test_every_subcommand_answers_help(sub):
    r = mage(sub, "--help")
    assert r.returncode == 0 and r.stdout.startswith(f"usage: python -m mage {sub}"), r.stderr
    assert all(o in r.stdout for o in OPTIONS[sub].split() if o.startswith("--"))


def test_measure_offers_the_passes_an_extension_adds():
    assert "--passes {forward,backward,both}" in mage("measure", "--help").stdout
