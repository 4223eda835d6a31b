"""Kernels as ``torch.library`` operators that torch.compile can see into.

A ``custom_op`` is opaque to torch.compile: the compiled graph calls it back through PyTorch's
dispatcher and our Python launcher on every call. The H200's launch-path rows put that dispatch at a
median of 14-22 us a call by operation (``data/h200/launch_path.csv``), and V-JEPA 2's swapped encoder
makes about a hundred such calls a forward: its compiled bf16 span was 12.6 ms against the stock
compiled model's 8.9 (H100 run 20261206T032703Z) while its kernel time was lower. A ``triton_op`` shows
the kernel itself to the compiler (``wrap_triton``), which then launches it from its generated code
like one of its own kernels.

Under Triton's CPU interpreter there is no kernel the compiler could trace, so there the operator
stays a ``custom_op``, as it was. Eager calls take the lean launch either way.

One cost of seeing into the operator: a compiled graph holds the kernel's launch as traced, tile choice
included, and torch.compile's caches key it by the kernels named here (``kernels=``), not by the
Python that chose the tiles; a changed tile rule needs the caches cleared.
"""
from __future__ import annotations

from typing import Callable

import torch

from . import common

_EAGER = (torch.Tensor, torch.nn.Parameter)


def kernel_op(name: str, fake: Callable, kernels: tuple = ()) -> Callable:
    """Decorator: ``fn`` (whose ``kernels`` are launched through ``op_launch``) as the operator ``name``,
    with ``fake`` computing the output's metadata (for tracing, where no kernel runs)."""

    def dec(fn):
        make = torch.library.custom_op if common.interpreting() else torch.library.triton_op
        op = make(name, fn, mutates_args=())
        # a triton_op's fake is ``fn`` itself, traced with its launch as a no-op; ``fake`` gives the
        # same metadata without walking the launcher (and names a bad argument the same way)
        op.register_fake(fake)
        # PyTorch finds a triton_op's kernels by reading its source for wrap_triton(<kernel>), which ours
        # reach through op_launch: name them, or its compiled-graph cache would not see a kernel change
        found = getattr(getattr(torch._library, "triton", None), "triton_ops_to_kernels", None)
        if isinstance(found, dict) and kernels:
            found[name] = list(kernels)
        return op

    return dec


def op_launch(kernel, grid, *args, traced: dict | None = None, **kw):
    """``launch`` for the body of a ``kernel_op``: while torch.compile traces the operator (its tensors
    are then the tracer's, not plain tensors), the kernel call it records; otherwise the lean launch.
    (The function that holds the body is also called directly, outside any operator: plain tensors
    tell that case too, where ``wrap_triton`` alone would route the call through its slower eager
    path.) ``traced``: arguments only the traced call is given (the lean launch takes a runtime
    argument by keyword only through Triton's slower path)."""
    if type(args[0]) in _EAGER or common.interpreting():
        return common.launch(kernel, grid, *args, **kw)  # looked up per call: the stage probe swaps it
    kw = dict(kw, **(traced or {}))
    # the compiler's kernel call binds every parameter by name and takes no default: pass them all
    given = {p.name for p in kernel.params[:len(args)]} | set(kw)
    kw = dict(kw, **{p.name: p.default for p in kernel.params if p.name not in given and p.has_default})
    torch.library.wrap_triton(kernel)[grid](*args, **kw)
    return None
