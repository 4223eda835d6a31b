"""V-JEPA 2's rotary position embedding swapped for the fused kernel: the model surgery.

The kernel and its operator ``mage::vjepa2_rope3`` (x, grid, seg) live in their operation folder,
``kernels/rope3`` (a model's part: checked against float64 and measured like an operation, shown with
this model); the registry's discovery imports it, and the swapped attentions reach it through
``torch.ops.mage`` (``swap._ops``), so this extension names no kernel module. Only the encoder's case is
taken (no position masks, ids 0..N-1 over the grid, equal axes, FP32 or bf16, inference); any other call
runs the model's own code.
"""
from __future__ import annotations

import types

import torch
from torch import nn

from .swap import _ops


class KernelRope(nn.Module):
    """The rotation through the operator (torch.compile graphs keep it as one call)."""

    def __init__(self, grid: int, seg: int):
        super().__init__()
        self.grid, self.seg = grid, seg

    def forward(self, qk):
        return _ops().vjepa2_rope3(qk, self.grid, self.seg)


def _apply(self, qk, pos_ids):
    """The attention's ``apply_rotary_embeddings`` with the fused rotation where it is the encoder's case
    (ids 0..N-1, equal axes, FP32 or bf16, inference: the operator has no backward); the model's own
    method otherwise."""
    d, h, w = pos_ids
    if (d.dim() == 1 and self.d_dim == self.h_dim == self.w_dim and d.numel() == qk.shape[2]
            and qk.dtype in (torch.float32, torch.bfloat16) and not (torch.is_grad_enabled() and qk.requires_grad)):
        return self.rope(qk)
    return type(self).apply_rotary_embeddings(self, qk, pos_ids)


def swap_rope(model: nn.Module) -> int:
    """Give every V-JEPA 2 rotary attention (a module with the model's ``apply_rotary_embeddings`` and its
    axis widths) the fused rotation; returns how many."""
    n = 0
    for m in model.modules():
        if hasattr(type(m), "apply_rotary_embeddings") and all(hasattr(m, a) for a in ("d_dim", "h_dim", "w_dim", "grid_size")):
            m.rope = KernelRope(int(m.grid_size), int(m.d_dim))
            m.apply_rotary_embeddings = types.MethodType(_apply, m)
            n += 1
    return n
