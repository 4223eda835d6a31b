"""The launch-path extension: where a small call's host time goes, stage by stage (``breakdown``, the
``launch-path`` subcommand), and one implementation's calls alone for a hardware profiler (``hw_profile``)."""
from . import cli  # noqa: F401 - importing it plugs in the subcommand
