"""The Triton column: one kernel per operation (one launch per call), registered as implementation
'triton', each also a torch.library operator ('mage::triton_<op>'). Tile sizes are data: each op's
module lists the SWEEP of configs to try and the DEFAULTS chosen per shape set.
"""
from __future__ import annotations

from mage.errors import MageInputError
from mage.ops import OPS
from mage.registry import Impl

from . import bias_gelu, common, layernorm, matmul, neighbor_agg, triangle

MODULES = {"matmul": matmul, "bias_gelu": bias_gelu, "layernorm": layernorm, "triangle": triangle,
           "neighbor_agg": neighbor_agg}


def _module(op: str):
    if op not in MODULES:
        raise MageInputError("triton_ops", "op", f"must be one of {list(MODULES)}, got {op!r}")
    return MODULES[op]


def sweep_configs(op: str, dtype: str = "fp32") -> list[dict]:
    """The tile configs to try for ``op``; the first is the plain one a newcomer would write."""
    mod = _module(op)
    if op == "matmul" and dtype != "fp32":
        return [dict(c) for c in (mod.SWEEP_TF32 if dtype == "tf32" else mod.SWEEP_BF16)]
    return [dict(c) for c in mod.SWEEP]


def default_config(op: str, shape_set: str = "field", dtype: str = "fp32") -> dict:
    """The config chosen for a shape set ('field', 'large', 'sweep') or a shape key."""
    defaults = _module(op).DEFAULTS
    defaults = defaults[dtype] if op == "matmul" else defaults
    return dict(defaults[shape_set])


def variant(op: str, dtype: str = "fp32", **config) -> Impl:
    """An unregistered Impl of ``op`` running with ``config`` (missing keys from the defaults)."""
    mod = _module(op)
    if dtype not in OPS[op].dtypes:
        raise MageInputError(op, "dtype", f"must be one of {OPS[op].dtypes}, got {dtype!r}")
    # complete the config now so the Impl records every tile choice it runs with
    full = common.choose(op, {"sweep": default_config(op, "sweep", dtype)}, {}, config)
    if op == "matmul":
        return common.impl(op, mod.matmul, dtype, full, dtype=dtype)
    prepare = mod.prepare if op == "neighbor_agg" else None
    return common.impl(op, getattr(mod, op), dtype, full, prepare=prepare)


def reuse(op: str, config: dict) -> dict:
    """Structural reuse of one program's step: distinct inputs loaded, multiply-adds, and their ratio
    (a 16 x 16 matmul tile with BLOCK_K = 16 loads 512 values for 4096 multiply-adds: 8 per load)."""
    mod = _module(op)
    if not hasattr(mod, "reuse"):
        raise MageInputError(op, "op", "has no multiply-adds to reuse inputs for (only matmul and triangle)")
    return mod.reuse({**default_config(op, "sweep"), **config})


__all__ = ["MODULES", "sweep_configs", "default_config", "variant", "reuse"]
