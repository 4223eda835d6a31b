"""The service extension: latency as a service sees it, closed and open loops with a dynamic batcher
(``loops``), on a CUDA device (``gpu``, ``session``), their statistics (``stats``), the ``serve`` subcommand."""
from . import cli  # noqa: F401 - importing it plugs in the subcommand
