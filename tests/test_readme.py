"""The README's commands, as a newcomer types them. Every `make` target it names exists; every command run
with the venv's Python (no GPU needed) runs and succeeds; every GPU command parses with the command line's
own parser, so an option renamed in the code fails here instead of in a reader's terminal; every data
folder it names exists."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.mage_cli import mage

from mage.__main__ import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)```", README, re.S)


def _commands():
    """Each command line of the README's bash blocks, without its comment ('#' after two spaces)."""
    for block in BLOCKS:
        for line in block.splitlines():
            cmd = re.split(r"\s{2,}#", line)[0].strip()
            if cmd and not cmd.startswith("#"):
                yield cmd


COMMANDS = list(_commands())
MAKE = sorted({c.split()[1] for c in COMMANDS if c.startswith("make ")})
VENV = [c for c in COMMANDS if ".venv/bin/python" in c]
GPU = [c for c in COMMANDS if "python3 -m mage " in c]


def test_the_readme_has_commands_of_every_kind():
    assert {"book", "test", "test-all", "check", "measure"} <= set(MAKE), MAKE
    assert len(VENV) >= 4 and len(GPU) >= 5, (VENV, GPU)


@pytest.mark.parametrize("target", MAKE)
def test_every_make_target_exists(target):
    r = subprocess.run(["make", "-n", target, "MACHINE=x"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "No rule" not in r.stderr, r.stderr


def _mage_args(cmd):
    words = shlex.split(cmd)
    i = words.index("mage") if "mage" in words else None
    return None if i is None or words[i - 1] != "-m" else words[i + 1:]


@pytest.mark.parametrize("cmd", GPU)
def test_gpu_commands_parse(cmd):
    args = _mage_args(cmd)
    if args is None:  # a module of its own (mage.ext.launch_path.hw_profile): it exists
        mod = re.search(r"-m (mage\.\w+)", cmd).group(1)
        assert (ROOT / (mod.replace(".", "/") + ".py")).exists(), mod
        return
    build_parser().parse_args(args)  # argparse exits (status 2) on an unknown option or choice


@pytest.mark.parametrize("cmd", VENV)
def test_venv_commands_run(cmd, tmp_path, monkeypatch):
    words = [w.replace("_scratch/", f"{tmp_path}/") for w in shlex.split(cmd)]
    for w in words:  # any data folder named must exist (written ones go to tmp_path)
        if w.startswith("data/"):
            assert (ROOT / w).is_dir(), w
    env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=\S*", w))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    words = words[len(env):]
    assert words[0] == ".venv/bin/python", cmd
    monkeypatch.chdir(ROOT)
    if words[1:3] == ["-m", "mage"]:
        r = mage(*words[3:])
    else:
        r = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])


def test_every_data_folder_named_exists():
    for name in {n.rstrip(".") for n in re.findall(r"\bdata/[\w.-]+", README)} - {"data/mygpu"}:
        assert (ROOT / name).is_dir(), name
