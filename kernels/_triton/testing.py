"""What the Triton tests share (kernels/<op>/test_<op>_triton.py and tests/test_triton.py): markers for
the interpreter and the GPU, the registered column and its pinned variants, and the checks every tile
config of an operation must pass."""
from __future__ import annotations

import importlib
import os

import pytest
import torch

from mage import ops, registry
from mage.check import check

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
cpu_only = pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1")


def gpu(fn):
    """Marks a test 'gpu' (the H200 run selects them with -m gpu) and skips it without a CUDA GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(fn))


def module(op: str):
    """The op's Triton module: an operation's ``triton_kernel`` (its kernel, FIRST, SWEEP, DEFAULTS and
    launcher), or a model block's ``triton_block``."""
    for name in ("triton_kernel", "triton_block"):
        try:
            return importlib.import_module(f"kernels.{op}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"kernels.{op}.{name}":
                raise
    raise ModuleNotFoundError(f"kernels.{op} has no triton_kernel.py or triton_block.py")


def impl(op: str, dtype: str = "fp32") -> registry.Impl:
    return registry.get(op, "triton", dtype)


def variant(op: str, dtype: str = "fp32", **config) -> registry.Impl:
    return impl(op, dtype).variant(**config)


def check_every_sweep_config(op: str, shape: dict, dtype: str = "fp32") -> None:
    """Every config of the op's sweep passes the float64 check at one small awkward shape (the
    interpreter's cost grows with the tile size, so one shape each)."""
    for cfg in impl(op, dtype).sweep:
        r = check(variant(op, dtype, **cfg), shape, trials=1, device="cpu")
        assert r.passed, f"{op} {cfg}: {r.reason}"


def check_shapes(impl: registry.Impl, shapes, dist: str = "normal", trials: int = 1) -> None:
    """``impl`` passes the float64 check on the CPU at every one of ``shapes``."""
    for shape in shapes:
        r = check(impl, shape, trials=trials, dist=dist, device="cpu")
        assert r.passed, (shape, dist, r.reason)


def check_forced(op: str, config: dict, shape: dict, dist: str = "heavy") -> None:
    r = check(variant(op, **config), shape, trials=2, dist=dist, device="cpu")
    assert r.passed, f"{op} {config} {shape}: {r.reason}"


def rel_err(got, ref) -> float:
    return float((got.double() - ref).norm() / ref.norm().clamp_min(1e-300))


def assert_refuses(fn, op: str, arg: str, *args, **kwargs):
    """``fn(*args)`` raises the project's input error naming ``op`` and ``arg``."""
    from mage.errors import MageInputError
    with pytest.raises(MageInputError) as e:
        fn(*args, **kwargs)
    assert (e.value.op, e.value.arg) == (op, arg), str(e.value)
    return e.value


def spec(op: str):
    return ops.OPS[op]
