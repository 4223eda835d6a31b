"""What the Triton columns share: each op's ``triton_kernel.py`` holds one kernel (one launch per call),
its launcher and its tiles (a ``TileTable``: named configs, the sweep's order, the rule that picks one
from a call's sizes), and registers it here as implementation 'triton' (each is also a torch.library
operator, 'mage::triton_<op>').
"""
from __future__ import annotations

import functools

from mage import facets
from mage.registry import Impl, declare, register, set_role

from . import common, stages
from .tile_table import TileTable

facets.declare_column("triton", label="Triton", order=10, color="#E69F00")  # after the library columns; Okabe-Ito orange
set_role("custom", "triton")  # the project's own kernels: what a block's Amdahl prediction is about


def register_kernel(op: str, launcher, tiles: TileTable, precision: str = "fp32", prepare=None,
                    interpret: bool = True, limits=None, **fixed) -> None:
    """Register ``launcher(*inputs, out=None, **config)`` as op's 'triton' column at ``precision``.

    The Impl records no fixed config: ``config_for(shape)`` is the config ``tiles``' rule picks from
    the shape's sizes (the launcher's own choice), ``sweep`` the configs a tile sweep tries (the first:
    the plain one a newcomer would write) and ``variant(**config)`` builds an Impl pinned to one config.
    ``fixed``: launcher arguments that are not tile choices (matmul's precision). ``limits(config, shape)``:
    why a variant pinned to ``config`` does not take ``shape`` (a config the launcher refuses there), or None."""
    def fn(*inputs, out=None):
        return launcher(*inputs, out=out, **fixed)

    fn.__name__ = f"{op}_triton_{precision}"
    register(op, "triton", dtype=precision, family="triton", interpret=interpret, needs_cuda=True, prepare=prepare,
             config_for=tiles.choose, sweep=tiles.sweep_configs(),
             variant=functools.partial(_variant, op, launcher, tiles, precision, prepare, interpret, fixed, limits))(fn)
    # its launch-path stages, for the extension that times them (stage by stage)
    declare("stages", op, "triton", precision)(functools.partial(stages.hook, op, fixed))


def _variant(op, launcher, tiles, precision, prepare, interpret, fixed, limits, **config) -> Impl:
    """An unregistered Impl of ``op`` running with ``config`` (missing keys from the table's base
    config, so the Impl records every tile choice it runs with)."""
    full = tiles.complete(config)
    fn = functools.partial(launcher, **fixed, **full)
    prep = functools.partial(prepare, **full) if prepare else None
    return Impl(op=op, name="triton", fn=fn, dtype=precision, family="triton", needs_cuda=True, interpret=interpret,
                prepare=prep, config=dict(full), limits=functools.partial(limits, full) if limits else None)


__all__ = ["register_kernel", "common", "TileTable"]
