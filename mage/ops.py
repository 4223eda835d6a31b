"""What an operation is, for everything that handles one: the ``Op`` spec, and ``OPS``, the specs found
under the kernel roots (one folder an operation, see ``mage.registry``). The precisions
(``mage.precision``) and the input checks that specs share (``mage.op_inputs``) are importable from here.

Every implementation of an operation takes the same positional inputs plus ``out=None`` and returns the
output tensor. The spec's float64 reference is the single definition of "correct" for all of them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from .errors import MageInputError
# what specs import from here: the precisions and the input checks live in their own modules
from .op_inputs import (  # noqa: F401
    check_out, contiguous, device_of, dim, input_bytes, randn, same_device, same_dtype, tensor, torch_dtype,
)
from .precision import FLOAT, PRECISIONS, TOLERANCE, TORCH_DTYPE, Precision, peak_tflops  # noqa: F401


def shape_key(shape: dict) -> str:
    """'M=1024,K=1024,N=1024': the shape as one readable, sortable string for tidy data."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def parse_shape(key: str) -> dict:
    out = {}
    for part in key.split(","):
        k, v = part.split("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


# ------------------------------------------------------------------------------------------ targets
@dataclass(frozen=True)
class Target:
    """A speed target, checked against a recorded run: ``impl`` at every shape of ``shape_set`` (or at
    ``shape`` only) must reach ``wanted`` in ``measure``: 'speedup' (the baseline's time over the impl's
    time in ``view``), 'share_of_copy' (compulsory bytes over time, over the run's copy bandwidth) or
    'share_of_rate' (FLOPs over time, over the run's matmul rate at the row's precision).
    ``baseline_dtype``: the baseline's precision when it differs (fp32x3 against cuBLAS FP32)."""

    impl: str
    measure: str
    wanted: float
    baseline: str = ""
    shape_set: str = "large"
    shape: Optional[dict] = None
    view: str = "kernel_time"
    dtype: str = "fp32"
    baseline_dtype: str = ""


# --------------------------------------------------------------------------------------- batching
@dataclass(frozen=True)
class Batching:
    """How requests to a block batch, for the service experiment (``mage.ext.service.loops``).

    One request is the spec's inputs at a shape whose ``size`` entry is ``items`` (a sequence of tokens,
    a complex, a graph). The inputs named in ``axes`` belong to the request; every other input is a
    weight shared by all requests, resident on the device. Three ways to put requests together:

    - concatenate (the default): the spec's inputs at ``size = B * items`` are B requests side by side
      along the given axes, and the output's requests lie along ``out_axis`` (tokens of a transformer);
    - ``stack``: every request has the same shape and B of them lie on a new leading axis of each
      argument in ``axes`` (axis 0) and of the output (complexes cropped to one size): the block's
      implementations take that leading batch axis;
    - ``join``: the spec says how (a disjoint union of graphs, whose indices shift by the nodes before
      them). ``join(pool, pinned)`` takes every request's own values ({argument index: value}, on the
      host, drawn at the request shape) and returns them ready in host memory (pinned or not), each
      request of one layout (so a batch of B of them always has one shape); ``join.batch(requests,
      slots, device, non_blocking)`` returns the batch's values of the ``axes`` arguments ({index:
      value}) on ``device``: the requests' values copied into the first ``len(requests)`` of ``slots``
      request slots of memory it keeps per ``slots``, the other slots holding earlier requests (the
      padding). The output's requests lie along ``out_axis``, each of the same size.

    ``count(shape)`` is how many items (tokens, pairs, nodes) one request at ``shape`` holds, for
    throughput in items per second; by default ``shape[size]``."""

    size: str  # the shape entry that sets one request's size ('T': tokens)
    axes: dict  # {argument name: the axis requests are stacked along}; the other arguments are weights
    out_axis: int = 0
    items: int = 1  # the request's ``size`` entry unless the command says otherwise
    # arguments that grow with the batch but do not travel with a request: built on the device once per
    # batch size and kept there (a graph's structure), so the transfers leave them out
    resident: tuple = ()
    stack: bool = False
    join: Optional[object] = None
    count: Optional[Callable] = None

    @property
    def mode(self) -> str:
        return "join" if self.join is not None else "stack" if self.stack else "concat"

    def items_in(self, shape: dict) -> int:
        """Items one request at ``shape`` holds."""
        return int(self.count(shape)) if self.count else int(shape[self.size])


# ------------------------------------------------------------------------------------------ parts
@dataclass(frozen=True)
class Part:
    """One operation a block calls, for the Amdahl attribution (``mage.ext.amdahl.attribution``): which operation, the
    shapes the block calls it at, and the kernel names that are its work in a profile of the block.

    A kernel belongs to the first part, in the block's order, with a pattern that finds it in the
    kernel's name (``re.search``, case-insensitive); a kernel no part claims is 'other'."""

    op: str  # an operation's name (a spec under kernels/), or a label with no spec ('gate', 'elementwise')
    patterns: tuple  # regular expressions searched in kernel names
    # block shape -> the operation's shapes, one per call the block makes of it; None: no spec to measure
    shapes: Optional[Callable] = None
    # the operation's implementation that the block's custom column runs for it: "" for the column's own
    # (the Triton block runs the Triton kernel, the Rust block the Rust one), or a column by name; a dict
    # gives one per block precision, and "name@dtype" a column of the operation at another precision
    # (the blocks' FP32 GEMMs are tf32x3: the matmul's 'triton' column at 'fp32x3')
    custom: Any = ""
    # another part whose kernels can also be this part's work: where a column runs both through one
    # library (an einsum and a projection both become cuBLAS GEMMs), the names cannot tell them apart,
    # and that part's time is shared out in proportion to the two operations' own times at these shapes
    split_from: str = ""
    # block precision -> the tiles the custom block passes to that column (its variant's config), or
    # None where it runs the column's own default: the operation alone is then timed with the block's
    # tiles, so its speedup is the operation's, not the tiles' (a callable, so a spec need not import
    # the launcher that imports it)
    tiles: Optional[Callable] = None

    def column(self, dtype: str, custom: str) -> tuple[str, str]:
        """(implementation, precision) of this operation that the block's custom column ``custom`` runs
        at the block precision ``dtype``."""
        c = self.custom.get(dtype, "") if isinstance(self.custom, dict) else self.custom
        name, _, at = (c or custom).partition("@")
        return name, at or dtype


# ---------------------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Op:
    """One operation: everything an implementation, a test, the harness or a page needs to know."""

    name: str
    args: tuple[str, ...]
    equation: str  # LaTeX, shown by the book
    make_inputs: Callable  # (shape, gen, device, dtype, dist) -> tuple of inputs
    reference: Callable  # (*inputs) -> float64 tensor
    out_spec: Callable  # (*inputs) -> (shape, dtype)
    validate: Callable  # (*inputs) -> None, raises MageInputError
    flops: Callable  # shape dict -> int
    bytes: Callable  # (shape dict, itemsize) -> int: compulsory, each input read once, each output written once
    shapes: dict  # 'field' | 'large' | 'sweep' -> list of shape dicts
    awkward: list  # small shapes that are not multiples of any tile, one row, empty
    random_shape: Callable  # (random.Random) -> one shape dict, sizes that are multiples of nothing
    label: str = ""  # 'LayerNorm': how figures and prose name it
    short: str = ""  # a label that fits a narrow panel title
    order: int = 50  # position among the operations in figures
    marker: str = "circle"  # plotly marker symbol in scatter figures
    work: str = "bytes"  # what the size sweep plots time against: 'bytes' or 'flops'
    # "operation", or "block": a model block built from operations (measured by the same harness, shown
    # in its own part of the book, never among the operations)
    kind: str = "operation"
    dtypes: tuple = ("fp32",)
    tolerance: Optional[dict] = None  # per dtype; default TOLERANCE
    targets: tuple = ()
    # (config) -> {loads, macs, reuse}: the structural reuse of one tile step, for ops that reuse inputs
    reuse: Optional[Callable] = None
    # (shape, probe inputs, seed, dtype) -> another input set on CUDA for cold-cache rotation
    other_set: Optional[Callable] = None
    # (shape, inputs) -> the shape the cost model should see (a generated graph's actual degree)
    actual_shape: Optional[Callable] = None
    # how requests batch when the op serves requests (a block); None: not served (mage.ext.service.loops)
    batch: Optional[Batching] = None
    # the operations a block calls and the kernel names of each (mage.ext.amdahl.attribution); () for an operation
    parts: tuple = ()
    # The backward's cost (issue 16), as flops and bytes are the forward's: grad_flops(shape) -> FLOPs of
    # the gradients of every floating input; grad_bytes(shape, itemsize) -> their compulsory bytes (what
    # backward must read: the saved tensors and the output's gradient; and write: the inputs' gradients).
    # None: not stated yet, and the backward rows carry no floor.
    grad_flops: Optional[Callable] = None
    grad_bytes: Optional[Callable] = None

    def inputs(self, shape: dict, seed: int = 0, device="cpu", dtype="fp32", dist="normal"):
        """Fresh inputs from a seeded generator on ``device``; 'heavy' draws heavy-tailed values."""
        gen = torch.Generator(device=device).manual_seed(seed)
        return self.make_inputs(shape, gen, device, dtype, dist)

    def another_set(self, shape: dict, probe, seed: int, dtype: str):
        if self.other_set:
            return self.other_set(shape, probe, seed, dtype)
        return self.inputs(shape, seed=seed, device="cuda", dtype=dtype)

    def cost(self, shape: dict, dtype: str = "fp32", inputs=None) -> tuple[int, int]:
        """(FLOPs, compulsory bytes) of one call at ``shape`` (given ``inputs``, at their actual sizes)."""
        if inputs is not None and self.actual_shape:
            shape = self.actual_shape(shape, inputs)
        return self.flops(shape), self.bytes(shape, 2 if dtype == "bf16" else 4)

    def grad_cost(self, shape: dict, dtype: str = "fp32", inputs=None) -> tuple:
        """(FLOPs, compulsory bytes) of the backward at ``shape``; (None, None) where the spec states none."""
        if self.grad_flops is None or self.grad_bytes is None:
            return None, None
        if inputs is not None and self.actual_shape:
            shape = self.actual_shape(shape, inputs)
        return self.grad_flops(shape), self.grad_bytes(shape, 2 if dtype == "bf16" else 4)

    def tol(self, dtype: str) -> float:
        return (self.tolerance or TOLERANCE)[dtype]

    def random_shapes(self, n: int = 30, seed: int = 0) -> list[dict]:
        rnd = random.Random(f"{self.name}-{seed}")
        return [self.random_shape(rnd) for _ in range(n)]

    def empty_out(self, *inputs):
        shape, dtype = self.out_spec(*inputs)
        return torch.empty(shape, dtype=dtype, device=device_of(inputs))

    def validate_out(self, inputs, out) -> None:
        """The caller's ``out`` must be exactly the output's shape, dtype and device, and contiguous."""
        if out is not None:
            shape, dtype = self.out_spec(*inputs)
            check_out(self.name, out, shape, dtype, device_of(inputs))


class _Specs(dict):
    """The specs, found on first use and kept in figure order. ``find`` is how they are found: the
    registry sets it to its discovery when imported (``mage`` imports it), so this module needs none."""

    find: Optional[Callable[[], None]] = None

    def _ready(self):
        if not getattr(self, "_found", False) and self.find is not None:
            self._found = True
            self.find()
            ordered = sorted(dict.items(self), key=lambda kv: (kv[1].order, kv[0]))
            dict.clear(self)
            dict.update(self, ordered)

    def __getitem__(self, k):
        self._ready()
        return dict.__getitem__(self, k)

    def __contains__(self, k):
        self._ready()
        return dict.__contains__(self, k)

    def __iter__(self):
        self._ready()
        return dict.__iter__(self)

    def __len__(self):
        self._ready()
        return dict.__len__(self)

    def keys(self):
        self._ready()
        return dict.keys(self)

    def values(self):
        self._ready()
        return dict.values(self)

    def items(self):
        self._ready()
        return dict.items(self)

    def get(self, k, default=None):
        self._ready()
        return dict.get(self, k, default)

    def add(self, spec: Op) -> None:
        """Registered by discovery; re-sorted so the figure order holds."""
        dict.__setitem__(self, spec.name, spec)
        ordered = sorted(dict.items(self), key=lambda kv: (kv[1].order, kv[0]))
        dict.clear(self)
        dict.update(self, ordered)


OPS: dict[str, Op] = _Specs()


def get(name: str) -> Op:
    if name not in OPS:
        raise MageInputError("mage", "op", f"must be one of {list(OPS)}, got {name!r}")
    return OPS[name]
