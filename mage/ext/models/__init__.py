"""Models as their users run them, with this project's kernels swapped in: the module surgery
(``swap``), the models the note names (``vjepa2``, ``schnet``) and the ``models`` subcommand.
Forward passes (and SchNet's forces) only."""

from mage.env import declare_library

declare_library("transformers", "torch-geometric")  # the models' own code: its version is part of the record

from . import cli  # noqa: F401,E402 - importing it plugs in the `models` subcommand
