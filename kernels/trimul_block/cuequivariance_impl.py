"""NVIDIA's fused triangle update (``cuequivariance_torch.triangle_multiplicative_update``, what Boltz-2
and OpenFold3 call) as a column of this block: the same AlphaFold form (biases, the output gate of C
channels applied after the output projection), its weights taken from the block's arguments.

The block keeps its five input projections as one matrix [C, 4H + C] whose columns are: left gate, left
value, right gate, right value, output gate. The library takes ``Linear``-layout weights: the two values
stacked as ``p_in`` [2H, C] (left then right), the two gates as ``g_in`` [2H, C], the output gate as
``g_out`` [C, C] and the output projection as ``p_out`` [C, H]. Its FP32 products follow
``torch.backends.cuda.matmul.allow_tf32`` (off: tf32x3, FP32-class) unless ``precision`` says otherwise.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.layernorm.spec import EPS
from mage import env, facets
from mage.errors import MageInputError
from mage.registry import register

# the versions a run measured go into its environment record
env.declare_library("cuequivariance", "cuequivariance-torch", "cuequivariance-ops-torch-cu13",
                    "cuequivariance-ops-torch-cu12")


def library_arguments(z, mask, gamma_in, beta_in, w_in, b_in, gamma_out, beta_out, w_out, b_out) -> dict:
    """The block's arguments as the library's keywords (weights transposed to Linear's layout; copies
    made once per input set, outside the timed call)."""
    C, H = z.shape[-1], gamma_out.shape[0]
    a_gate, a_val, b_gate, b_val, g = w_in.split((H, H, H, H, C), dim=1)
    ba_gate, ba_val, bb_gate, bb_val, bg = b_in.split((H, H, H, H, C))
    batched = z.dim() == 4
    return dict(
        x=z if batched else z[None], mask=mask if batched else mask[None],
        norm_in_weight=gamma_in, norm_in_bias=beta_in,
        p_in_weight=torch.cat([a_val, b_val], 1).t().contiguous(), p_in_bias=torch.cat([ba_val, bb_val]),
        g_in_weight=torch.cat([a_gate, b_gate], 1).t().contiguous(), g_in_bias=torch.cat([ba_gate, bb_gate]),
        norm_out_weight=gamma_out, norm_out_bias=beta_out,
        p_out_weight=w_out.t().contiguous(), p_out_bias=b_out,
        g_out_weight=g.t().contiguous(), g_out_bias=bg, eps=EPS)


HIDDEN_MULTIPLE = 32  # the library's documented limit on the hidden width (0.13's docstring, note 3)
# and an undocumented one on the pair width C: its projection GEMM asserts C % TILE_K == 0 (TILE_K 32 unless its
# tuner chose 16-64; an H100 run of 2026-12-07 failed every column at C = 57 with a bare AssertionError)
INPUT_MULTIPLE = 32


def limits(shape: dict) -> Optional[str]:
    """Why the library does not take ``shape``: a hidden width or a pair width that is not a multiple of 32."""
    H, C = shape["H"], shape.get("C")
    if H % HIDDEN_MULTIPLE:
        return f"cuEquivariance takes hidden widths that are multiples of {HIDDEN_MULTIPLE}, not H = {H}"
    if C is not None and C % INPUT_MULTIPLE:
        return (f"cuEquivariance's projection GEMM takes pair widths that are multiples of its K tile "
                f"({INPUT_MULTIPLE}), not C = {C}")
    return None


def ieee_limits(shape: dict) -> Optional[str]:
    """The IEEE column's limits: the above, and equal pair and hidden widths (0.13 raises "Precision.IEEE is not
    supported by the unequal-width compiler-visible decomposition" at C = 32, H = 128: an H100 run of 2026-12-07)."""
    why = limits(shape)
    if why is None and shape.get("C") is not None and shape["C"] != shape["H"]:
        why = f"cuEquivariance's IEEE precision takes equal pair and hidden widths, not C = {shape['C']}, H = {shape['H']}"
    return why


def unavailable() -> Optional[str]:
    try:
        import cuequivariance_torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any failure to import is a reason, reported as such
        return f"cuequivariance_torch is not installed ({type(e).__name__}: {e})"
    return None


def call(kw: dict, batched: bool, precision=None):
    """One call of the library on prepared keywords; the output in the block's layout."""
    from cuequivariance_torch import triangle_multiplicative_update
    out = triangle_multiplicative_update(direction="outgoing", precision=precision, **kw)
    return out if batched else out[0]


facets.declare_column("cuequivariance", label="cuEquivariance", order=4, color="#76B900")  # a library column
facets.declare_column("cuequivariance_ieee", label="cuEquivariance (IEEE FP32)", order=5, color="#3A5F00")


class _Column:
    """The library's call on keywords prepared once per input set; ``precision``: None follows the
    global TF32 switch (off here: tf32x3 at FP32), 'IEEE' asks for FP32 products on the FMA units."""

    def __init__(self, precision):
        self.precision = precision

    def prepare(self, *inputs):
        H, C = inputs[6].shape[0], inputs[0].shape[-1]  # gamma_out: [H]; z: [..., C]
        why = limits(dict(H=H))
        if why:  # refused here, so the library never sees a width it may compute wrong
            raise MageInputError("trimul_block", "gamma_out", why)  # why names the library
        why = (ieee_limits if self.precision == "IEEE" else limits)(dict(H=H, C=C))  # H passed: what is left is C's
        if why:  # refused here, where the library would fail an assertion or raise without naming an argument
            raise MageInputError("trimul_block", "z", why)
        torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32-class: tf32x3, not TF32
        return library_arguments(*inputs), inputs[0].dim() == 4

    def __call__(self, kw, batched, out=None):
        y = call(kw, batched, self.precision)
        if out is None:
            return y
        out.copy_(y)  # the harness's poisoned buffer: the library allocates its own output
        return out


for _dtype in ("fp32", "bf16"):
    register("trimul_block", "cuequivariance", dtype=_dtype, family="library", available=unavailable, limits=limits,
             prepare=_Column(None).prepare, config={"call": "triangle_multiplicative_update", "precision": "default"}
             )(_Column(None))
register("trimul_block", "cuequivariance_ieee", dtype="fp32", family="library", available=unavailable, limits=ieee_limits,
         prepare=_Column("IEEE").prepare, config={"call": "triangle_multiplicative_update", "precision": "IEEE"}
         )(_Column("IEEE"))
