"""The command line called in this process: ``mage("check", "--ops", "layernorm")`` returns what
``python -m mage check --ops layernorm`` would (exit status, stdout, stderr) without starting a Python
and importing torch again for each call (10-45 s apiece on a 2-core machine). One test,
``test_cli.py::test_the_real_command_line``, keeps the real subprocess so the entry point itself is run.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from unittest import mock

from mage.__main__ import main


def mage(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m mage *args`` in-process; ``env`` replaces the environment for the call."""
    out, err = io.StringIO(), io.StringIO()
    patch = mock.patch.dict(os.environ, env, clear=True) if env is not None else contextlib.nullcontext()
    with patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's errors; sys.exit("message") prints it and exits 1, as Python does
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            if isinstance(e.code, str):
                print(e.code, file=err)
    return subprocess.CompletedProcess(["python", "-m", "mage", *args], code, out.getvalue(), err.getvalue())
