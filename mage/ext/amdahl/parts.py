"""The operations a block calls (its ``parts`` facet), for the Amdahl attribution: which kernels of a
block's profile are each operation's work, and at which shapes and tiles to time the operation alone."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Part:
    """One operation a block calls, for the Amdahl attribution (``mage.ext.amdahl``): which operation, the
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
