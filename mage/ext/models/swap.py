"""Swap a model's LayerNorms, Linears and Linear + GELU pairs for this project's kernels, by rewriting
its modules in place (the model's source is not edited). Each swapped module calls a ``torch.library``
operator, so eager runs and torch.compile graphs both reach the kernel.

The swap is for inference: the operators for Linear have no backward, and a swapped Linear refuses to
run where autograd would record it. A module the kernels cannot compute exactly (a LayerNorm over
several dimensions or without affine parameters, a tanh-approximate GELU, a gated MLP) is left as it is
and counted, never replaced by something that computes another function.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from mage import registry
from mage.errors import MageInputError

_FLOATS = (torch.float32, torch.bfloat16)


_OPS = None


def _ops():
    """The operators live in the kernel packages, which the registry's discovery imports (so this
    extension names no kernel module): after it, ``torch.ops.mage.*`` holds them all. Discovery runs
    once: it scans the operation folders, and run on every call it cost V-JEPA 2's swapped encoder about
    0.4 s of host time a forward (and torch.compile a graph break at every swapped module)."""
    global _OPS
    if _OPS is None:
        registry.load()
        _OPS = torch.ops.mage
    return _OPS


def _rows(x: torch.Tensor) -> torch.Tensor:
    """[..., C] as [R, C] rows (a view where x's layout allows it)."""
    return x.reshape(-1, x.shape[-1])


class KernelLayerNorm(nn.Module):
    """``nn.LayerNorm`` over the last dimension through the Triton LayerNorm, with the model's own eps
    and the original's parameters (shared, not copied)."""

    def __init__(self, ln: nn.LayerNorm):
        super().__init__()
        self.weight, self.bias, self.eps = ln.weight, ln.bias, float(ln.eps)

    def forward(self, x):
        return _ops().triton_layernorm(_rows(x), self.weight, self.bias, self.eps).view(x.shape)


class KernelLinear(nn.Module):
    """``nn.Linear`` (and, with ``gelu``, the exact GELU after it) as one GEMM with the bias and GELU
    in its epilogue: the pre-activation is never written to memory."""

    def __init__(self, lin: nn.Linear, gelu: bool = False):
        super().__init__()
        self.weight, self.bias, self.gelu = lin.weight, lin.bias, gelu

    def forward(self, x):
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            raise MageInputError("swap", "model", "a swapped Linear has no backward: run the swapped model under "
                                 "torch.inference_mode() or torch.no_grad()")
        y = _ops().triton_linear(_rows(x), self.weight, self.bias, self.gelu)
        return y.view(*x.shape[:-1], self.weight.shape[0])


def _exact_gelu(m) -> bool:
    """Whether an activation module computes the exact (erf) GELU, asked of the module itself on a few
    float64 values (its class name would not tell a tanh approximation from the exact function)."""
    probe = torch.linspace(-6.0, 6.0, 25, dtype=torch.float64)
    try:
        got = m(probe)
    except Exception:  # noqa: BLE001 - an activation that cannot take float64 is not one we can vouch for
        return False
    return isinstance(got, torch.Tensor) and torch.allclose(got, nn.functional.gelu(probe), rtol=0, atol=1e-12)


@dataclass
class Swapped:
    """What the swap did: modules replaced by kind, and modules left as they were with the reason."""

    replaced: Counter = field(default_factory=Counter)
    kept: Counter = field(default_factory=Counter)

    def __str__(self):
        done = ", ".join(f"{n} {k}" for k, n in sorted(self.replaced.items())) or "nothing"
        left = ", ".join(f"{n} {k}" for k, n in sorted(self.kept.items()))
        return f"replaced {done}" + (f"; kept {left}" if left else "")


def _layernorm_ok(m: nn.LayerNorm) -> str:
    if len(m.normalized_shape) != 1:
        return "LayerNorm over several dimensions"
    if m.weight is None or m.bias is None:
        return "LayerNorm without affine weight and bias"
    return ""


def _linear_ok(m: nn.Linear) -> str:
    return "" if m.bias is not None else "Linear without bias"


# Where our GEMM loses to cuBLAS, the swap leaves the Linears to cuBLAS unless asked. At bf16 it does: the
# MLP block's tile sweep chose cuBLAS (50.6 us against 58.5 for the best fused tile, T = 2,048, H200 run
# 20261204T205225Z), and in V-JEPA 2 our bf16 GEMMs took 4.05 ms against cuBLAS's 2.45 (run 175641Z).
_GEMM_WINS = {torch.float32: True, torch.bfloat16: False}


def swap(model: nn.Module, *, layernorm: bool = True, linear: bool | None = None,
         mlp: bool | None = None) -> Swapped:
    """Rewrite ``model`` in place. ``mlp``: a module with children ``fc1`` (Linear), an exact-GELU
    activation (``activation``/``act``) and ``fc2`` becomes one fused Linear + GELU and a Linear;
    ``linear``: every other biased Linear becomes the epilogue GEMM; ``layernorm``: every last-dimension
    affine LayerNorm. ``linear`` and ``mlp`` left unset follow the model's precision: swapped at FP32,
    where our fp32x3 GEMM beats cuBLAS's FP32, kept (and counted) at bf16, where cuBLAS is faster. The
    parameters must be FP32 or bf16 (the kernels' storage)."""
    if not isinstance(model, nn.Module):
        raise MageInputError("swap", "model", f"must be a torch.nn.Module, got {type(model).__name__}")
    floats = set()
    for name, p in model.named_parameters():
        if p.is_floating_point() and p.dtype not in _FLOATS:
            raise MageInputError("swap", "model", f"parameter {name} is {p.dtype}; the kernels take float32 or bfloat16")
        floats.add(p.dtype)
    gemm_wins = all(_GEMM_WINS[d] for d in floats)
    done = Swapped()
    by_precision = linear is None and not gemm_wins
    linear = gemm_wins if linear is None else linear
    mlp = gemm_wins if mlp is None else mlp
    fused = set()
    if mlp:
        for parent in list(model.modules()):
            act_name = next((a for a in ("activation", "act") if hasattr(parent, a)), None)
            fc1, fc2 = getattr(parent, "fc1", None), getattr(parent, "fc2", None)
            if act_name is None or not isinstance(fc1, nn.Linear) or not isinstance(fc2, nn.Linear):
                continue
            act = getattr(parent, act_name)
            # fc1 -> act -> fc2 in a row: fc2 reads all of fc1's width. A gated MLP (GEGLU) splits fc1's
            # output in two and gates one half with the other: fc1 is twice fc2's input, and fusing the
            # activation into all of fc1 would compute another function
            why = (_linear_ok(fc1) or ("" if fc1.out_features == fc2.in_features else "a gated MLP (fc1 wider than "
                                       "fc2's input)") or ("" if _exact_gelu(act) else
                                                           f"activation {type(act).__name__} is not the exact GELU"))
            if why:
                done.kept[f"MLP ({why})"] += 1
                continue
            parent.fc1, fused_act = KernelLinear(fc1, gelu=True), nn.Identity()
            setattr(parent, act_name, fused_act)
            fused.add(id(fc2))
            done.replaced["Linear + GELU"] += 1
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm) and layernorm:
                why = _layernorm_ok(child)
                new = None if why else KernelLayerNorm(child)
                kind = "LayerNorm"
            elif isinstance(child, nn.Linear) and (linear or id(child) in fused):
                why = _linear_ok(child)
                new = None if why else KernelLinear(child)
                kind = "Linear"
            else:
                continue
            if why:
                done.kept[why] += 1
            else:
                setattr(parent, child_name, new)
                done.replaced[kind] += 1
    if by_precision:  # the Linears left to cuBLAS, counted so the swap says what it did not touch
        left = sum(isinstance(m, nn.Linear) for m in model.modules())
        if left:
            done.kept["Linear (cuBLAS is faster at bf16)"] += left
    return done
