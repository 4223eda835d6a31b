"""Training paths: which callable runs an implementation forward with autograd recording, and how the
trainer treats it. Kernel packages state them in the core's ``'train'`` table (``mage.registry.declare``);
this module reads that table. ``differentiable`` and ``train_as_graph`` write it, for code that may
import the extension (tests, notebooks).
"""
from __future__ import annotations

from typing import Callable, Optional

from mage import registry
from mage.errors import MageInputError
from mage.registry import Impl

TABLE = "train"


def differentiable(op: str, name: str, dtype: str = "fp32", autocast: bool = False,
                   step_graph: bool = False, keep: Optional[Callable] = None) -> Callable:
    """Decorator: ``@differentiable("layernorm", "triton")`` names fn as that implementation's training
    path: the harness runs forward and backward through it. ``autocast``: the path computes in bf16 under
    ``torch.autocast`` (a torch.library operator with no autocast rule does not: it keeps computing in
    its inputs' precision, so a bf16 training row of it would be an FP32 one mislabelled).
    ``step_graph``: the trainer records this column's whole step (forward, backward and the optimizer's
    update) as one CUDA graph and replays it, as a kernel author owning the training loop would.
    ``keep(*inputs)``: the buffers the path reads from caches that hold them weakly or drop old entries
    (a graph structure's plans): a step recorded as a CUDA graph keeps them alive while it replays.
    Kernel packages write the same entry with ``registry.declare("train", ...)``."""
    if op not in registry.OPS:
        raise MageInputError("differentiable", "op", f"must be one of {list(registry.OPS)}, got {op!r}")
    info = {k: v for k, v in dict(autocast=autocast, step_graph=step_graph, keep=keep).items() if v}
    return registry.declare(TABLE, op, name, dtype, **info)


def _entry(key) -> Optional[dict]:
    """The table's entry for ``key`` with a graphed column's resolved to its plain column's path."""
    e = registry.declared(TABLE).get(key)
    if e is None or not e.get("as_graph_of"):
        return e
    op, name, _ = key
    p = registry.get(op, e["as_graph_of"], "fp32")
    fn = train_fn(p)
    if fn is None:
        raise MageInputError("differentiable", p.name, f"has no training path for {name} to record")
    return dict(fn=fn, autocast=follows_autocast(p), step_graph=True, keep=train_keep(p), prepare=p.prepare)


def train_prepare(impl: Impl) -> Optional[Callable]:
    """The input preparation of ``impl``'s training path (the column's own unless it trains as another)."""
    e = _entry(impl.key)
    return e["prepare"] if e and "prepare" in e else impl.prepare


def train_keep(impl: Impl) -> Optional[Callable]:
    e = _entry(impl.key)
    return e.get("keep") if e else None


def follows_autocast(impl: Impl) -> bool:
    """Whether ``impl``'s training path computes in bf16 under ``torch.autocast``: the library family's
    columns do; any other only if it registered so."""
    e = _entry(impl.key)
    if e is not None:
        return bool(e.get("autocast"))
    return impl.family == registry.claimed("library_family")


def step_graphed(impl: Impl) -> bool:
    """Whether the trainer replays ``impl``'s whole training step as one CUDA graph."""
    e = registry.declared(TABLE).get(impl.key)
    return bool(e and (e.get("step_graph") or e.get("as_graph_of")))


def trains_as_one_graph(op: str, name: str) -> bool:
    """``step_graphed`` by names (a recorded row's op and implementation; training paths are FP32's)."""
    e = registry.declared(TABLE).get((op, name, "fp32"))
    return bool(e and (e.get("step_graph") or e.get("as_graph_of")))


def train_fn(impl: Impl) -> Optional[Callable]:
    """The callable that runs ``impl`` forward with autograd recording, or None when it has none. The
    library family's columns are differentiable as they are; every other column must register one."""
    e = _entry(impl.key)
    if e is not None:
        return e["fn"]
    return impl.fn if impl.family == registry.claimed("library_family") else None
