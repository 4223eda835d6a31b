"""Models as their users run them, with this project's kernels swapped in: the module surgery
(``swap``), the models the note names (``vjepa2``, ``schnet``, ``mace``; ``atoms``: their box of atoms)
and the ``models`` subcommand. Forward passes (and the molecular models' forces) only."""

from mage.env import declare_library

# the models' own code: its version is part of the record
declare_library("transformers", "torch-geometric", "mace-torch", "e3nn")

from . import cli  # noqa: F401,E402 - importing it plugs in the `models` subcommand
