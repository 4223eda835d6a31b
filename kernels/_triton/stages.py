"""The launch-path stages of a Triton column (``mage.ext.launch_path.breakdown`` times each alone).

One real call is watched first: the config choices the launcher asks for and every Triton launch it
makes through ``common.launch`` (kernel, grid, arguments) are recorded, then each stage is replayed on
its own with exactly those arguments. The launch is the lean one (``kernels/_triton/launch.py``): its
key and look-up are the 'binding', the rest its driver call; Triton's own ``JITFunction.run`` of the
same launches is timed beside it as two entries (whole, and its binder alone), for comparison. Under
TRITON_INTERPRET=1 there is no compiled kernel, so the launch stages are absent and the interpreted
kernel lands in the whole call's unnamed remainder.
"""
from __future__ import annotations

import contextlib

import torch

from mage import ops

from . import common
from . import launch as lean
from .tile_table import TileTable

CHECKS, CHOICE, ALLOC = "argument checks", "config choice", "allocation"
LAUNCH, BIND, DRIVER = "Triton launch", "launcher argument binding", "driver launch"
OPERATOR, DISPATCH = "torch.library operator", "custom-op dispatch"
TRITON_RUN, TRITON_BIND = "JITFunction.run launch", "JITFunction.run binding"


def _tensors(inputs) -> dict:
    """The tensors a call reads, by name: the inputs themselves or the tensors an input object holds
    (a validated graph's arrays), the same set the launchers hand to ``common.on_device``."""
    named = {}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            named[f"arg{i}"] = x
        else:
            # a graph keeps its arrays in slots (read-only), other objects in their __dict__
            fields = getattr(x, "__slots__", None) or list(vars(x))
            named.update({f"arg{i}.{k}": getattr(x, k) for k in fields
                          if isinstance(getattr(x, k, None), torch.Tensor)})
    return named


@contextlib.contextmanager
def _watch(seen: dict):
    """Record the launcher's config choices (its tile table's memoised ``plan`` or its ``choose``;
    outermost calls only) and its launches of compiled Triton kernels while the block runs."""
    from triton.runtime.jit import JITFunction
    choose, plan, go = TileTable.choose, TileTable.plan, common.launch
    depth = [0]

    def spying(fn):
        def spy(*a, **k):
            if depth[0] == 0:
                seen["choose"].append((fn, a, k))
            depth[0] += 1
            try:
                return fn(*a, **k)
            finally:
                depth[0] -= 1
        return spy

    def spy_launch(kernel, grid, *args, **kw):
        if type(kernel) is JITFunction:
            seen["launch"].append((kernel, grid, args, dict(kw)))
        return go(kernel, grid, *args, **kw)

    TileTable.choose, TileTable.plan, common.launch = spying(choose), spying(plan), spy_launch
    try:
        yield
    finally:
        TileTable.choose, TileTable.plan, common.launch = choose, plan, go


def _module(op: str):
    """The op's launcher module: an operation's triton_kernel, or a block's triton_block (one whose
    column takes prepared inputs has its own ``_checked`` for them)."""
    import importlib
    for leaf in ("triton_kernel", "triton_block"):
        try:
            return importlib.import_module(f"kernels.{op}.{leaf}")
        except ModuleNotFoundError:
            pass
    return None


def hook(op: str, fixed: dict, impl, inputs) -> dict:
    """The stages of one call of ``impl`` (a registered Triton column) on ``inputs``."""
    spec = ops.OPS[op]
    seen = {"choose": [], "launch": []}
    with _watch(seen):
        impl.fn(*inputs)
    named = _tensors(inputs)

    checked = getattr(_module(op), "_checked", None)

    def checks():  # the launcher's own checks where it has them (the path a call takes), else the spec's
        if checked is not None:
            checked(*inputs)
        else:
            spec.validate(*inputs)
            common.on_device(op, named)

    def choice():
        for fn, a, k in seen["choose"]:
            fn(*a, **k)

    def launch():
        for kernel, grid, args, kw in seen["launch"]:
            lean.launch(kernel, grid, *args, **kw)

    def bind():  # the lean launch's key and look-up, without the launch
        for kernel, grid, args, kw in seen["launch"]:
            try:
                kernel._mage_lean.entries.get(kernel._mage_lean.key(lean._current_device(), args, kw)[0])
            except (KeyError, TypeError):  # a call the lean launch hands to Triton: no key to time
                pass

    def triton_run():
        for kernel, grid, args, kw in seen["launch"]:
            kernel.run(*args, grid=grid, warmup=False, **kw)

    def triton_bind():  # Triton's binder, specialisation key and cache look-up, without the launch
        for kernel, grid, args, kw in seen["launch"]:
            kernel.run(*args, grid=grid, warmup=True, **kw)

    stages = [(CHECKS, checks), (CHOICE, choice), (ALLOC, lambda: spec.empty_out(*inputs))]
    if seen["launch"]:
        stages += [(LAUNCH, launch), (BIND, bind)]
    parts = {"stages": stages, "nested": {BIND}, "derived": [(DRIVER, LAUNCH, BIND)], "entries": []}
    if seen["launch"]:
        parts["entries"] += [(TRITON_RUN, triton_run), (TRITON_BIND, triton_bind)]
    operator = getattr(getattr(torch.ops, "mage", None), f"triton_{op}", None)
    if operator is not None:
        try:
            operator(*inputs, **fixed)
        except Exception:  # noqa: BLE001 - an operator taking other arguments (raw arrays): not timed
            operator = None
    if operator is not None:
        parts["entries"].append((OPERATOR, lambda: operator(*inputs, **fixed)))
        parts["derived"].append((DISPATCH, OPERATOR, "whole call"))
    return parts
