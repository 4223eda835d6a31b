"""mage: check, time and profile implementations of GPU operations (found under kernels/), and record tidy data.

This package is the core; the experiments plug into it from ``mage.ext`` and the book's glue and figures
(plotly) live in ``mage.book``. Measuring imports only torch, numpy and pandas.
"""
from .errors import MageInputError
from .ops import OPS, shape_key
from .registry import get as get_impl, impls, register


def run(op: str, impl: str, *inputs, dtype: str = "fp32", out=None):
    """Validate the inputs, then call one implementation: the safe entry point for notebooks and users."""
    from . import ops
    spec = ops.get(op)
    spec.validate(*inputs)
    spec.validate_out(inputs, out)
    im = get_impl(op, impl, dtype)
    if not im.callable:
        raise MageInputError(op, "impl", f"{impl!r} times itself in its own process; it cannot be called")
    args = im.prepare(*inputs) if im.prepare else inputs
    return im.fn(*args, out=out)


def load(path, run=None):
    """Load a data directory (or one CSV) as one tidy DataFrame (the latest run of each case unless
    ``run`` says otherwise); see ``mage.data``. Select rows through ``mage.views``."""
    from .data import load as _load
    return _load(path, run=run)


__all__ = ["MageInputError", "OPS", "shape_key", "impls", "get_impl", "register", "run", "load"]
