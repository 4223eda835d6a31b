"""A block as a CUDA graph: the custom block's Python launches recorded once and replayed as one.

The custom blocks launch five to eight kernels a call from Python; each launch is host time, and in a
closed loop the launches are where the tail comes from. ``Graphed(spec, fn)`` turns a block function
into a callable that keeps one CUDA graph per input signature:

- the signature: every tensor's shape, dtype, strides and device, and for a *held* argument (an object
  the graph reads in place, such as the message-passing layer's ``CSRGraph``) its identity and the
  version counters of its tensors, so an in-place write misses and is validated again;
- on a miss: the inputs are checked (the device first, then the spec's own checks and ``out``) before
  anything is captured, copied into static buffers of their own, the call warmed up on a side stream
  (as CUDA graph capture requires: lazy initialisation, Triton's compilation and any host-side plan
  that reads device memory back happen there, outside the capture), then captured once;
- on every call: the inputs are copied into the static buffers (one device-to-device copy each,
  skipped when the caller passes the static buffer itself), the graph replayed, and the static output
  returned, or copied into ``out``. A block's weights (the arguments a request does not bring:
  its ``batch`` facet) are read in place, as torch.compile's CUDA graphs read parameters: the graph records
  the caller's weight tensors themselves, keyed by identity, address, shape and strides (another
  tensor, or one resized, is another signature, validated and captured), so an update in place is
  read by the next replay and a served request copies only its own inputs. As with ``torch.compile``'s CUDA graphs, the returned tensor is
  the graph's own and the next call with that signature overwrites it: a caller who keeps a result
  copies it (or passes ``out``).

The cache is bounded (least recently used first out): each entry holds its graph's memory pool. An
entry whose output is empty (no rows, no nodes) holds no graph: the plain call runs, since there is
no work to record. A call made while a stream is being captured (the harness's own graph view) is
refused: a graph is not captured inside another graph, and the harness records why there is no replay.

The capture and replay primitives are an object (``capture=``), so the CPU tests run the wrapper's
logic with a fake one that replays by calling the block again on the static buffers.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional

import torch

from mage import facets
from mage.errors import MageInputError
from mage.op_inputs import check_out

# How figures and tables show the column: label, column order (just after 'triton', 10; before Rust,
# 20) and colour (a darker orange than the Triton column's, the same family read at a glance).
facets.declare_column("triton_graphs", label="Triton block + CUDA graphs", order=11, color="#A6611A")
# eager PyTorch's block recorded the same way: the library column a serving stack or a training loop
# that owns its graphs would run (after compile + graphs, 2; a dark blue of the same family)
facets.declare_column("pytorch_graphs", label="PyTorch eager + CUDA graphs", order=3, color="#004C80")
# Signatures kept per column: a served block pads its batches to powers of two (1, 2, 4, ... up to
# the largest batch: 11 sizes at 1024), and every size must stay captured or the queue's calls capture.
MAXSIZE = 16
# With weights read in place, each input set the harness rotates through for a cold-cache measurement
# (at most mage.measure.COLD_MAX_SETS, 64) brings weights of its own, so it is a signature of its own:
# room for all of them, so no timed call captures.
MAXSIZE_WEIGHTS_IN_PLACE = 64
WARMUPS = 3  # calls on the side stream before capture (compilation, autotune-free plans, workspaces)


class NestedCaptureError(RuntimeError):
    """Called while a CUDA graph is being captured: the block's graph is not captured inside another."""


class CaptureError(RuntimeError):
    """The block's call could not be recorded as a CUDA graph (it synchronised, or read memory back)."""


class CudaCapture:
    """The real primitives: CUDA tensors only, warm-up on a side stream, ``torch.cuda.graph`` capture."""

    def usable(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def capturing(self) -> bool:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()

    def warm(self, call: Callable, device):
        """``call`` run WARMUPS times on a side stream that waits for the copies into the static buffers."""
        main = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            for _ in range(WARMUPS):
                y = call()
        main.wait_stream(side)
        return y

    def capture(self, call: Callable, device):
        """-> (replay, static output, what to keep alive)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(device), torch.cuda.graph(graph):
            y = call()
        return graph.replay, y, graph

    def release(self, entry) -> None:
        # a replay of the evicted graph may still be running; its pool must outlive it
        torch.cuda.synchronize()


class CallAgain:
    """Stand-in primitives for a machine without a GPU (the tests): any device, the warm-up one plain
    call, and a "replay" that calls the block again on the static buffers into the static output, so
    a result is right only if the inputs were really copied in. Counts what it did."""

    def __init__(self):
        self.warms = self.captures = 0
        self.released, self.in_capture = [], False

    def usable(self, device) -> bool:
        return True

    def capturing(self) -> bool:
        return self.in_capture

    def warm(self, call: Callable, device):
        self.warms += 1
        return call()

    def capture(self, call: Callable, device):
        self.captures += 1
        y = call()
        return (lambda: y.copy_(call())), y, None

    def release(self, entry) -> None:
        self.released.append(entry)


class _Entry:
    __slots__ = ("statics", "out", "replay", "keep")

    def __init__(self, statics, out, replay, keep):
        self.statics, self.out, self.replay, self.keep = statics, out, replay, keep


def address(t: torch.Tensor) -> tuple:
    """A tensor read in place, as a signature sees it: where its memory is and how it is laid out (its
    values may change: the replay reads them there)."""
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device)


def weights(spec) -> tuple:
    """A block's arguments that no request brings (its ``batch`` facet): its weights; () for an operation."""
    batch = facets.get(spec, "batch", None)
    return tuple(a for a in spec.args if a not in batch.axes) if batch is not None else ()


def _static_like(t: torch.Tensor) -> torch.Tensor:
    # the same strides when the input is dense (so the block sees exactly what the caller passed),
    # contiguous otherwise (an expanded or gapped input cannot be copied into its own layout)
    return torch.empty_like(t, memory_format=torch.preserve_format)


class Graphed:
    """``Graphed(spec, fn)(*inputs, out=None)``: ``fn`` (the block, ``fn(*inputs, out=None)``) replayed
    from a CUDA graph per input signature. ``hold``: {argument name: versions(obj)} for the arguments
    the graph reads in place (kept alive by the entry), keyed by the object's identity and that tuple,
    or by the tuple alone where the function's ``by_identity`` is False; ``keep(*inputs)``: anything
    else the captured call reads that the block caches outside the capture (a host-side plan's
    buffers), kept alive by the entry; ``capture``: the primitives (default ``CudaCapture()``)."""

    def __init__(self, spec, fn: Callable, hold: Optional[dict] = None, keep: Optional[Callable] = None,
                 maxsize: int = MAXSIZE, capture=None, name: str = "triton_graphs", plain: str = "triton",
                 in_place: tuple = ()):
        if maxsize < 1:
            raise MageInputError(spec.name, "maxsize", f"must be at least 1, got {maxsize}")
        hold = dict(hold or {})
        for arg in in_place:  # tensors the graph reads where they are (weights): held by their address
            hold.setdefault(arg, address)
        self.spec, self.fn, self.hold, self.keep, self.maxsize = spec, fn, hold, keep, maxsize
        self.capture = capture if capture is not None else CudaCapture()
        self.cache: OrderedDict = OrderedDict()
        self.captures = 0  # signatures captured so far (the tests read it; a miss in a timed loop shows)
        self.plain = plain  # the column that runs the same block without the graph (named in errors)
        self.__name__ = f"{spec.name}_{name}"

    # ------------------------------------------------------------------------------ the signature
    def key(self, args) -> tuple:
        parts = []
        for name, a in zip(self.spec.args, args):
            if name in self.hold:
                try:
                    versions = tuple(self.hold[name](a))
                except Exception:  # noqa: BLE001 - not the object it should be: the spec says how
                    self.spec.validate(*args)
                    raise MageInputError(self.spec.name, name, f"is a {type(a).__name__}, not the object the "
                                         "block reads in place") from None
                # a hold function that says its key is the whole story (``by_identity = False``: the
                # buffers read and what the launch depends on) lets another object in those buffers hit
                ident = id(a) if getattr(self.hold[name], "by_identity", True) else None
                parts.append((name, "held", ident, versions))
            elif isinstance(a, torch.Tensor):
                parts.append((name, tuple(a.shape), a.dtype, a.stride(), a.device))
            else:
                try:
                    hash(a)
                except TypeError:
                    raise MageInputError(self.spec.name, name, f"is a {type(a).__name__}, which cannot be part "
                                         "of a CUDA graph's signature (tensors, held objects, plain values)") from None
                parts.append((name, "value", a))
        return tuple(parts)

    # ------------------------------------------------------------------------------ the call
    def __call__(self, *args, out=None):
        op = self.spec.name
        if self.capture.capturing():
            raise NestedCaptureError(f"{op}: the CUDA-graph column was called while a graph is being captured; "
                                     "it is one graph launch already and is not captured inside another")
        if len(args) != len(self.spec.args):
            raise MageInputError(op, "inputs", f"takes {len(self.spec.args)} inputs {list(self.spec.args)}, "
                                 f"got {len(args)}")
        k = self.key(args)
        entry = self.cache.get(k)
        if entry is None:
            entry = self._new(k, args, out)
        else:
            self.cache.move_to_end(k)
        if out is not None:  # the entry's output is the spec's output for this signature
            check_out(op, out, tuple(entry.out.shape), entry.out.dtype, entry.out.device)
        if entry.replay is None:  # nothing to record: the plain call
            return self.fn(*args, out=out)
        with torch.no_grad():
            for s, a in zip(entry.statics, args):
                if s is not None and s.data_ptr() != a.data_ptr():
                    s.copy_(a)
        entry.replay()
        return entry.out if out is None else out.copy_(entry.out)

    def clear(self) -> None:
        """Drop every captured graph (and its memory pool)."""
        while self.cache:
            self.capture.release(self.cache.popitem(last=False)[1])

    def _check(self, args, out) -> None:
        """Everything refused before a capture: a device a graph cannot record, the spec's own checks."""
        op = self.spec.name
        for name, a in zip(self.spec.args, args):
            device = getattr(a, "device", None)  # a tensor's, or a held object's (a graph's tensors)
            if isinstance(device, torch.device) and not self.capture.usable(device):
                raise MageInputError(op, name, f"is on {device}: a CUDA graph records GPU work only "
                                     f"(run the plain '{self.plain}' column, or move the inputs to the GPU)")
        self.spec.validate(*args)
        self.spec.validate_out(args, out)

    def _new(self, k, args, out) -> _Entry:
        self._check(args, out)
        op = self.spec.name
        statics = [None if (name in self.hold or not isinstance(a, torch.Tensor)) else _static_like(a)
                   for name, a in zip(self.spec.args, args)]
        with torch.no_grad():
            for s, a in zip(statics, args):
                if s is not None:
                    s.copy_(a)
        inputs = [a if s is None else s for s, a in zip(statics, args)]
        held = tuple(a for name, a in zip(self.spec.args, args) if name in self.hold)

        def call():
            return self.fn(*inputs)

        device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), None)
        y = self.capture.warm(call, device)
        kept = (held, self.keep(*inputs) if self.keep else None)
        if y.numel() == 0:
            entry = _Entry(statics, y, None, kept)
        else:
            try:
                try:
                    replay, y, graph = self.capture.capture(call, device)
                except torch.cuda.OutOfMemoryError:
                    self.clear()  # the other signatures' pools hold memory: give it back, try once more
                    replay, y, graph = self.capture.capture(call, device)
            except torch.cuda.OutOfMemoryError:
                raise  # as it is: a caller sizing batches to the memory limit reads it
            except Exception as e:  # noqa: BLE001 - say which block and why, keep nothing half-made
                raise CaptureError(f"{op}: the call could not be captured as a CUDA graph ({type(e).__name__}: "
                                   f"{e}); the plain '{self.plain}' column runs it") from e
            entry = _Entry(statics, y, replay, (kept, graph))
            self.captures += 1
        while len(self.cache) >= self.maxsize:
            _, old = self.cache.popitem(last=False)
            self.capture.release(old)
        self.cache[k] = entry
        return entry


def register_graphed(spec, fn: Callable, dtypes=("fp32", "bf16"), prepare: Optional[Callable] = None,
                     config: Optional[dict] = None, train: bool = False, name: str = "triton_graphs",
                     plain: str = "triton", family: str = "triton", **kw) -> dict:
    """Register ``Graphed(spec, fn, **kw)`` as ``spec``'s ``name`` column (the graphed form of the ``plain``
    column, in ``family``) at each of ``dtypes`` (one wrapper and cache per precision). Its prepare (never
    timed) runs the plain column's ``prepare`` and then one call, so the capture happens there and never
    inside a measurement. ``train``: the column trains as the plain column does, with the whole step
    (forward, backward, update) recorded as one CUDA graph (``mage.ext.training.train``; the plain column's training
    path must be registered first). Returns {dtype: the wrapper}."""
    from mage.registry import declare, register

    made = {}
    for dtype in dtypes:
        w = weights(spec)
        if w:
            kw.setdefault("maxsize", max(MAXSIZE, MAXSIZE_WEIGHTS_IN_PLACE))
        g = made[dtype] = Graphed(spec, fn, name=name, plain=plain, in_place=w, **kw)

        def prep(*inputs, _g=g):
            inputs = tuple(prepare(*inputs)) if prepare else inputs
            _g(*inputs)
            return inputs

        register(spec.name, name, dtype=dtype, family=family, needs_cuda=True, interpret=False, prepare=prep,
                 config=dict(config or {}, graph="one CUDA graph per input signature",
                             signatures=g.maxsize))(g)
    if train:  # trains as the plain column with the whole step one graph; no training path at other dtypes
        declare("train", spec.name, name, "fp32", as_graph_of=plain)(None)
        for dtype in (d for d in dtypes if d != "fp32"):
            declare("train", spec.name, name, dtype)(None)
    return made

