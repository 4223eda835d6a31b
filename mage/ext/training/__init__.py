"""The training extension: the backward and both passes of the one measurement loop (``passes``), the
training paths kernels declare (``paths``), and a whole training step per block (``train``, ``session``,
the ``train`` subcommand)."""
from . import cli, passes  # noqa: F401 - importing them plugs in the subcommand and the passes
