"""The Amdahl extension: a block's kernel time split by operation and the speedup Amdahl's law predicts
(``attribution``), measured on a GPU (``gpu``), in words (``text``), the ``amdahl`` subcommand."""
from . import cli  # noqa: F401 - importing it plugs in the subcommand
