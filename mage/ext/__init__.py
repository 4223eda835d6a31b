"""mage's extensions: the experiments beyond the core's one measurement loop, and the book's glue. Each is
a package listed in ``EXTENSIONS``; importing it plugs it into the core's extension points:

- subcommands (``mage.cli_common.subcommand``): ``add(sub)`` adds one subcommand to ``python -m mage``
  at a stated position in its ``--help``;
- measurement passes (``mage.hooks.add_pass``): a pass other than the forward call (backward, both),
  with a hook the one loop (``mage.measure``) asks what to admit, call, cost and replay;
- declarations (``mage.registry.declare``): what a kernel package states about an implementation for
  an extension to read ('train': its training path; 'stages': its launch-path stages), so kernels state
  it without importing any extension;
- roles (``mage.registry.set_role``): which column is the baseline, the custom one, the library family.

The core's modules import none of them (discovering the operations imports their facets, which name
the extensions' types); the command line loads this list (``load``). A new experiment is a new
package here and a line in ``EXTENSIONS``; ``Op`` and the registry do not grow.
"""
from __future__ import annotations

import importlib

EXTENSIONS = (
    "mage.ext.training",  # the backward passes of `measure`, and `train`
    "mage.ext.launch_path",  # `launch-path`; `python -m mage.ext.launch_path.hw_profile`
    "mage.ext.service",  # `serve`
    "mage.ext.amdahl",  # `amdahl`
    "mage.ext.models",  # `models`: V-JEPA 2 and SchNet with the project's kernels swapped in
    "mage.book",  # `import-published`, `targets`; the pages' glue and figures
)


def load() -> None:
    """Import every extension once (each plugs itself in on import)."""
    for name in EXTENSIONS:
        importlib.import_module(name)
