"""What the PyTorch columns share: the eager call of an op's plain expression, and the same expression
under torch.compile, compiled outside the timed calls.

The expressions are deliberately what a PyTorch user would write, with no validation of our own
(PyTorch raises its own errors); ``mage.run`` validates before calling any implementation. With ``out``
given (the checks pass a NaN-poisoned buffer) the result is copied into it; timed calls pass no ``out``.
"""
from __future__ import annotations

import torch

from mage import facets
from mage.registry import register, set_role

set_role("baseline", "pytorch")  # eager PyTorch: the column the others are compared with
set_role("library_family", "pytorch")  # its columns are differentiable (and follow autocast) as they are
set_role("compiled", "torch_compile")  # the compiler's column: what the memory-bound kernels race (issues 14, 16)

# How figures and prose name the columns, their order and colour (Okabe-Ito, blues; grey for the
# graph-replayed compile): library columns first.
facets.declare_column("pytorch", label="PyTorch eager", order=0, color="#0072B2")
facets.declare_column("torch_compile", label="torch.compile", order=1, color="#56B4E9")
facets.declare_column("torch_compile_graphs", label="torch.compile + CUDA graphs", order=2, color="#999999")


def into(out, y):
    return y if out is None else out.copy_(y)


def set_precision(dtype):
    # FP32 rows are IEEE FP32; TF32 rows let cuBLAS use the tensor cores. Set per call so one row's
    # setting never leaks into another's.
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"


def eager(op, expr, dtype, uses_matmul=False):
    if uses_matmul:
        def fn(*inputs, out=None):
            set_precision(dtype)
            return into(out, expr(*inputs))
    else:
        def fn(*inputs, out=None):
            return into(out, expr(*inputs))
    fn.__name__ = f"{op}_pytorch_{dtype}"
    return fn


class Compiled:
    """prepare() compiles for the given inputs and calls once, so compilation (timed by the harness as
    prepare time) never lands inside a measurement. One compiled graph per shape (dynamic=False).

    ``mode="reduce-overhead"`` also records the compiled kernels as a CUDA graph and replays it: one
    launch a call. Its output lives in the graph's memory and the next call overwrites it (as with
    torch.compile itself); each call marks a new step, so a caller keeping a result must copy it."""

    def __init__(self, op, expr, dtype, mode="default"):
        self.op, self.dtype, self.mode = op, dtype, mode
        # a size sweep compiles one graph per shape; the default limit of 8 would silently fall back
        # to eager for the rest
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        # Compile in this process: a pool of compile workers keeps running after compilation and was
        # seen to slow the host side of the spans measured right after it.
        torch._inductor.config.compile_threads = 1
        self.compiled = torch.compile(expr, dynamic=False, mode=None if mode == "default" else mode)

    def prepare(self, *inputs):
        set_precision(self.dtype)
        for _ in range(3 if self.mode == "reduce-overhead" else 1):  # graphs are recorded on a later call
            self(*inputs)
        return inputs

    def __call__(self, *inputs, out=None):
        set_precision(self.dtype)
        if self.mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        return into(out, self.compiled(*inputs))


def register_expression(op: str, expr, dtypes=("fp32",), uses_matmul=False, graphs=False, graph_kw=None) -> None:
    """The PyTorch columns of ``op``: eager (also on the CPU) and torch.compile (default mode); with
    ``graphs``, also torch.compile in "reduce-overhead" mode and eager PyTorch recorded as a CUDA graph
    per input signature ('pytorch_graphs', whose training step is one graph: forward, backward and the
    optimizer's update), both CUDA only. ``graph_kw``: the graph wrapper's options (``Graphed``: the
    arguments it holds in place, its signature limit)."""
    for dtype in dtypes:
        register(op, "pytorch", dtype=dtype, family="pytorch", needs_cuda=False)(eager(op, expr, dtype, uses_matmul))
        c = Compiled(op, expr, dtype)
        register(op, "torch_compile", dtype=dtype, family="pytorch", prepare=c.prepare, size_sweep=False,
                 config={"mode": "default", "dynamic": False})(c)
        if graphs:
            g = Compiled(op, expr, dtype, mode="reduce-overhead")
            register(op, "torch_compile_graphs", dtype=dtype, family="pytorch", prepare=g.prepare, size_sweep=False, needs_cuda=True, config={"mode": "reduce-overhead", "dynamic": False})(g)
            _graphed_eager(op, eager(op, expr, dtype, uses_matmul), dtype, graph_kw or {})


def _graphed_eager(op, fn, dtype, kw):
    """Eager PyTorch's call captured by the same wrapper the custom blocks' graphed column uses, so the
    two graphed columns differ by their kernels alone; it trains as eager PyTorch does, with the whole
    step recorded as one graph."""
    from kernels._triton.graphed import register_graphed  # the wrapper knows no kernel language
    from mage.ops import OPS
    register_graphed(OPS[op], fn, dtypes=(dtype,), name="pytorch_graphs", plain="pytorch", family="pytorch",
                     config={"of": "pytorch"}, train=True, **kw)
