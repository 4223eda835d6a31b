"""What an operation is, for everything that handles one: the ``Op`` spec, and ``OPS``, the specs found
under the kernel roots (one folder an operation, see ``mage.registry``). The precisions
(``mage.precision``) and the input checks that specs share (``mage.op_inputs``) are importable from here.

Every implementation of an operation takes the same positional inputs plus ``out=None`` and returns the
output tensor. The spec's float64 reference is the single definition of "correct" for all of them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from . import facets
from .errors import MageInputError
# what specs import from here: the precisions and the input checks live in their own modules
from .op_inputs import (  # noqa: F401
    check_out, contiguous, device_of, dim, input_bytes, randn, same_device, same_dtype, tensor, torch_dtype,
)
from .precision import FLOAT, PRECISIONS, TOLERANCE, TORCH_DTYPE, Precision, peak_tflops  # noqa: F401


def itemsize(dtype: str) -> int:
    """Bytes a stored value takes at ``dtype``, as the cost models count them (bf16: 2, the rest 4)."""
    return 2 if dtype == "bf16" else 4


def shape_key(shape: dict) -> str:
    """'M=1024,K=1024,N=1024': the shape as one readable, sortable string for tidy data."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def parse_shape(key: str) -> dict:
    out = {}
    for part in key.split(","):
        k, v = part.split("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


# ---------------------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Op:
    """One operation's mathematics: its arguments, equation, seeded inputs, float64 reference, output,
    checks, cost and shapes, the precisions it runs at and their tolerances. What the book and the
    experiments say of it (labels, targets, batching, a block's parts) are its facets (``mage.facets``)."""

    name: str
    args: tuple[str, ...]
    equation: str  # LaTeX, shown by the book
    make_inputs: Callable  # (shape, gen, device, dtype, dist) -> tuple of inputs
    reference: Callable  # (*inputs) -> float64 tensor
    out_spec: Callable  # (*inputs) -> (shape, dtype)
    validate: Callable  # (*inputs) -> None, raises MageInputError
    flops: Callable  # shape dict -> int
    bytes: Callable  # (shape dict, itemsize) -> int: compulsory, each input read once, each output written once
    shapes: dict  # set name -> list of shape dicts: 'field', 'large', 'sweep' and any of its own ('contest')
    awkward: list  # small shapes that are not multiples of any tile, one row, empty
    random_shape: Callable  # (random.Random) -> one shape dict, sizes that are multiples of nothing
    # "operation"; "block": a model block built from operations (measured by the same harness, shown
    # in its own part of the book, never among the operations); or "part": a model's part: an operation
    # lifted from a model the book runs, measured inside that model; shown neither among the operations
    # nor the blocks (checked and timed by the same harness, so its kernel is held to the same float64
    # reference). Readers that list operations or blocks select by kind, so a part needs no exclusion.
    kind: str = "operation"
    dtypes: tuple = ("fp32",)
    tolerance: Optional[dict] = None  # per dtype; default TOLERANCE
    # (*inputs) -> float64 tensor shaped as the reference: each output's terms in absolute value, summed
    # (its size before cancellation). Where given, the elementwise bound's rtol scales it instead of
    # |ref|: a sum of many terms that cancel to a small value carries the rounding of its large terms.
    magnitude: Optional[Callable] = None
    # per dtype: the fraction of elements allowed outside the elementwise bound (default none): rare
    # single elements the precision's own arithmetic puts there, eager PyTorch's composition included
    outliers: Optional[dict] = None
    # True where the output's last axis is one vector per row with a scale of its own (a normalisation,
    # then a projection and a gate, per row): each element's atol then takes the larger of the output's rms and
    # its row's, since bf16 rounding follows the row's scale and heavy-tailed inputs make a few rows far
    # larger than the rest
    row_scale: bool = False
    # (dtype, ref, *inputs) -> float64 tensor shaped as the reference ``ref``, or None: how far storing the
    # computation's intermediates at ``dtype`` can move each output element (``check.storage_spread`` over
    # the reference with its stored intermediates rounded). The elementwise bound adds twice it: where a
    # normalisation of a heavy-tailed row or a cancelling sum makes an element sensitive to that storage, any
    # implementation storing there moves it, and elsewhere the bound stays as tight as before
    storage_error: Optional[Callable] = None

    def inputs(self, shape: dict, seed: int = 0, device="cpu", dtype="fp32", dist="normal"):
        """Fresh inputs from a seeded generator on ``device``; 'heavy' draws heavy-tailed values."""
        gen = torch.Generator(device=device).manual_seed(seed)
        return self.make_inputs(shape, gen, device, dtype, dist)

    def _facet(self, key: str):
        """A facet the spec's own methods consult (None where not declared: a test's operation). The
        specs are discovered first, so a folder's facets.py has declared them."""
        OPS._ready()
        return facets.declared(self.name, key)

    def another_set(self, shape: dict, probe, seed: int, dtype: str):
        """Another input set on CUDA for cold-cache rotation: the ``other_set`` facet's where the folder
        declares one (a graph's structure kept), else fresh inputs."""
        other = self._facet("other_set")
        if other:
            return other(shape, probe, seed, dtype)
        return self.inputs(shape, seed=seed, device="cuda", dtype=dtype)

    def cost_shape(self, shape: dict, inputs=None) -> dict:
        """The shape the cost model sees: given ``inputs``, the ``actual_shape`` facet's where the folder
        declares one (a generated graph's actual mean degree), else ``shape``."""
        actual = self._facet("actual_shape") if inputs is not None else None
        return actual(shape, inputs) if actual else shape

    def cost(self, shape: dict, dtype: str = "fp32", inputs=None) -> tuple[int, int]:
        """(FLOPs, compulsory bytes) of one call at ``shape`` (given ``inputs``, at their actual sizes)."""
        shape = self.cost_shape(shape, inputs)
        return self.flops(shape), self.bytes(shape, itemsize(dtype))

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
            self._sort()

    def _sort(self):
        # figure order: the 'order' facet (declared beside the spec, read before any reader asks)
        ordered = sorted(dict.items(self), key=lambda kv: (facets.declared(kv[0], "order", 50), kv[0]))
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
        """Registered by discovery (after the folder's facets, so its order is known); re-sorted so the
        figure order holds."""
        dict.__setitem__(self, spec.name, spec)
        self._sort()


OPS: dict[str, Op] = _Specs()
facets.bind(OPS)


def get(name: str) -> Op:
    if name not in OPS:
        raise MageInputError("mage", "op", f"must be one of {list(OPS)}, got {name!r}")
    return OPS[name]


def shape_sets() -> list[str]:
    """Every shape set some operation names, the three common ones first (the command line's choices)."""
    names = {n for spec in OPS.values() for n in spec.shapes}
    common = [n for n in ("field", "large", "sweep") if n in names]
    return common + sorted(names - set(common))
