"""The Rust columns of neighbor_agg: 'rust', 'rust_ptx_py' and 'rust_native' (kernels/_rust). The kernel
is in rust.rs, what it takes in rust_table.py; the plan that cuts hub rows into chunks is built by the
library and cached per graph (kernels/_rust/plan.py)."""
import torch

from kernels import _rust
from kernels._rust.plan import plan_for
from kernels.neighbor_agg.graph import CSRGraph

CONFIG = dict(threads=256, warp_per_task=1, SPLIT=128, MAX_PARTS=1024)
_I32, _F32 = torch.int32, torch.float32


def graph_is_plain(graph) -> bool:
    """The cheap facts the kernel relies on, checked on every call: a built, unmodified CSRGraph whose
    indices are contiguous int32 and weights contiguous float32, one weight per column index. (The
    build accepts int64 indices, which the kernel would read as pairs of int32: a wrong answer.)"""
    if type(graph) is not CSRGraph:
        return False
    rowptr, col, w = graph.rowptr, graph.col, graph.w
    return (rowptr.dtype is _I32 and col.dtype is _I32 and w.dtype is _F32 and rowptr.is_contiguous()
            and col.is_contiguous() and w.is_contiguous() and col.numel() == w.numel() and graph.intact())


def prologue(inputs, out):
    """(output, device): the fast path when the graph and x are plain and on one device, else the
    full validation (which names the argument at fault)."""
    graph, x = inputs
    if graph_is_plain(graph):
        dev = graph.col.get_device()
        if (dev >= 0 and _rust.plain((x,), (2,)) == dev and graph.rowptr.get_device() == dev
                and graph.w.get_device() == dev):
            got = _rust.fast((x,), (2,), out, lambda x: (graph.n, x.shape[1]) if x.shape[0] == graph.n_src else None)
            if got:
                return got
    y = _rust.output("neighbor_agg", (graph, x), out)
    dev = _rust.on_cuda("neighbor_agg", {"rowptr": graph.rowptr, "col": graph.col, "w": graph.w, "x": x, "out": y})
    return y, dev


def args(graph, x, y):
    """The kernel's arguments, in its table's order."""
    plan = plan_for(graph)
    entries, ws, flags = plan.buffers(x.shape[1], x.device)
    return (graph.rowptr, graph.col, graph.w, x, y, entries, ws, flags, graph.n, graph.n_src, graph.nnz, x.shape[1],
            plan.tasks, plan.parts)


def prepare(graph, x):
    """Builds the plan and scratch buffers outside the timed calls."""
    if graph.col.device.type == "cuda":
        plan_for(graph).buffers(x.shape[1], x.device)
    return graph, x


_rust.register_op("neighbor_agg", "neighbor_agg", args, prologue, CONFIG, prepare=prepare)
