"""The cases the model run measures: each model built stock and swapped at one size and precision, its
float64 answer, and the calls the swap replaces at the shapes the model makes them (for Amdahl)."""
from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from . import atoms, mace, rope, schnet, vjepa2
from . import swap as S

DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Case:
    """One model at one size and precision: its columns (name -> a call), the float64 answer, the
    calls the swap replaces ((stock call, our call, count) at the model's shapes) and the kinds of
    work the swap removes whole (a GELU fused into its GEMM)."""

    op: str
    shape: str
    dtype: str
    columns: dict
    reference: Callable
    replaced: list
    fused_kinds: tuple = ()
    swap: str = ""  # what the swap replaced and kept, in words: the run records it beside the rows


def calls_made(swapped, video) -> Counter:
    """(kind, rows x width, weight shape, eps) -> how many calls of our kernels one encoder forward of the
    swapped model makes: 'linear', 'linear_gelu' (a Linear with the GELU after it fused), 'layernorm' or
    'rope' (queries' or keys' rotation: their [B, H, N, D] shape and (grid, channels an axis)). Counted on
    the swapped model, so only what the swap replaced is counted."""
    seen, hooks = Counter(), []

    def hook(mod, args, _out):
        if isinstance(mod, rope.KernelRope):
            seen[("rope", tuple(args[0].shape), (mod.grid, mod.seg), 0.0)] += 1
            return
        x = args[0].reshape(-1, args[0].shape[-1])
        if isinstance(mod, S.KernelLinear):
            kind, eps = ("linear_gelu" if mod.gelu else "linear"), 0.0
        else:
            kind, eps = "layernorm", mod.eps
        seen[(kind, tuple(x.shape), tuple(mod.weight.shape), eps)] += 1

    for m in swapped.modules():
        if isinstance(m, (S.KernelLinear, S.KernelLayerNorm, rope.KernelRope)):
            hooks.append(m.register_forward_hook(hook))
    try:
        vjepa2.encode(swapped, video)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _rope_call(x_shape, grid_seg, dtype, ours: bool, attn, device="cuda"):
    """The rotation of one [B, H, N, D] queries or keys tensor (a transposed view, as the model makes it):
    ours, or the model's own method on the stock attention ``attn`` with its position ids."""
    B, H, N, D = x_shape
    x = torch.randn((B, N, H, D), device=device, dtype=dtype).transpose(1, 2)
    fn = rope.KernelRope(*grid_seg) if ours else None
    pos = attn.get_position_ids(x.new_empty((B, N, 1)))

    def call():
        with torch.inference_mode():  # as the encoder runs
            return fn(x) if ours else type(attn).apply_rotary_embeddings(attn, x, pos)
    return call


def _call(kind, x_shape, w_shape, eps, dtype, ours: bool, device="cuda"):
    """One of the model's calls alone on fresh values, stock or ours. A fused Linear + GELU is, stock, the
    Linear alone: the stock GELU's time is taken from the model's profile (its 'gelu' kernels). Both run
    under inference mode, as the encoder does (a swapped Linear refuses to record autograd)."""
    x = torch.randn(x_shape, device=device, dtype=dtype)
    if kind == "layernorm":
        mod = nn.LayerNorm(w_shape[0], eps=eps).to(device, dtype)
        fn = S.KernelLayerNorm(mod) if ours else mod
    else:
        lin = nn.Linear(w_shape[1], w_shape[0]).to(device, dtype)
        fn = S.KernelLinear(lin, gelu=kind == "linear_gelu") if ours else lin

    def call():
        with torch.inference_mode():
            return fn(x)
    return call


def _columns(stock, swapped, call, ready=lambda m: m):
    """Eager and compiled columns, the eager ones first (a run cut while a model compiles keeps them);
    ``ready`` gives the copy of a model that torch.compile is handed."""
    cs, cw = torch.compile(ready(stock)), torch.compile(ready(swapped))
    return {"stock": lambda: call(stock), "swapped": lambda: call(swapped),
            "stock_compile": lambda: call(cs), "swapped_compile": lambda: call(cw)}


def with_eager(columns: dict, name: str, fn) -> dict:
    """``columns`` with ``name`` run among the eager ones, before any compiled column: a run cut by its
    time limit while a model compiles keeps it (MACE's package road was lost that way, H100, 05:40 UTC)."""
    eager = {k: v for k, v in columns.items() if not k.endswith("_compile")}
    return {**eager, name: fn, **{k: v for k, v in columns.items() if k.endswith("_compile")}}


def vjepa2_case(frames: int, dtype: str, small: bool = False):
    stock = vjepa2.build(vjepa2.TINY if small else vjepa2.VITL16, dtype=DTYPE[dtype], device="cuda")
    swapped = copy.deepcopy(stock)
    done = vjepa2.swap(swapped)
    video = vjepa2.clip(stock, frames, device="cuda")
    f64 = copy.deepcopy(stock).double()
    attn = vjepa2.rope_attention(stock)
    replaced = [((_rope_call(xs, ws, DTYPE[dtype], False, attn), _rope_call(xs, ws, DTYPE[dtype], True, attn), n)
                 if k == "rope" else
                 (_call(k, xs, ws, eps, DTYPE[dtype], False), _call(k, xs, ws, eps, DTYPE[dtype], True), n))
                for (k, xs, ws, eps), n in calls_made(swapped, video).items()]
    return Case("vjepa2_encoder", f"frames={frames},tokens={vjepa2.tokens(stock, frames)},batch=1", dtype,
                _columns(stock, swapped, lambda m: vjepa2.encode(m, video)),
                lambda: vjepa2.encode(f64, video.double()), replaced, fused_kinds=fused_kinds(done), swap=str(done))


def fused_kinds(done: S.Swapped) -> tuple:
    """The kinds of stock work the swap removes whole: where fc1 and its GELU became one call, the stock
    GELU's time leaves with it (its share in the profile); where the MLPs were kept (bf16), nothing does."""
    return ("gelu",) if done.replaced["Linear + GELU"] else ()


def _sum_call(index, n, F, ours: bool, stock_sum=None, device="cuda"):
    """A layer's sum of one message of width F per edge into its receiver (``index``, the model's own
    receivers, in the order its graph keeps them) over ``n`` atoms, forward and backward (forces need
    both). Stock: ``stock_sum(messages, index, n)`` where the model has its own, else ``index_add``."""
    msgs = torch.randn(index.numel(), F, device=device, requires_grad=True)
    dy = torch.randn(n, F, device=device)
    agg = atoms.KernelSum() if ours else None

    def fn():
        if ours:
            y = agg(msgs, index, dim_size=n)
        elif stock_sum is not None:
            y = stock_sum(msgs, index, n)
        else:
            y = torch.zeros(n, F, device=device).index_add(0, index, msgs)
        (g,) = torch.autograd.grad(y, msgs, dy)
        return y.detach(), g
    return fn


def schnet_case(n_atoms: int, small: bool = False):
    cfg = schnet.SMALL if small else schnet.PUBLISHED
    z, pos, L = schnet.box(n_atoms, device="cuda")
    edges = schnet.radius_graph(pos, L, cfg["cutoff"])
    stock = schnet.build(cfg, edges, L, device="cuda")
    swapped = copy.deepcopy(stock)
    n_layers = schnet.swap(swapped)
    f64 = copy.deepcopy(stock).double()
    E, F = edges.shape[1], cfg["num_filters"]
    replaced = [(_sum_call(edges[1], n_atoms, F, False), _sum_call(edges[1], n_atoms, F, True), n_layers)]
    return Case("schnet", f"atoms={n_atoms},edges={E},cutoff={cfg['cutoff']}", "fp32",
                _columns(stock, swapped, lambda m: schnet.energy_and_forces(m, z, pos)),
                lambda: schnet.energy_and_forces(f64, z, pos.double()), replaced,
                swap=f"replaced {n_layers} neighbour sums")


def _mace_scatter(msgs, index, n):
    from mace.tools.scatter import scatter_sum  # the sum the package's interactions call
    return scatter_sum(src=msgs, index=index, dim=0, dim_size=n)


def _refusing(why: str):
    """A column that could not be built: calling it raises ``why`` (the run records it as a failed check)."""
    def fn():
        raise RuntimeError(why)
    return fn


def mace_case(n_atoms: int, small: bool = False):
    """MACE's energy and forces in FP32 (its precision for simulation), stock, compiled, swapped, and on
    the package's cuEquivariance road ('accelerated', where the library is installed)."""
    cfg = mace.SMALL if small else mace.PUBLISHED
    z, pos, L = atoms.box(n_atoms, device="cuda", model="mace")
    g = mace.graph(z, pos, L, cfg["r_max"])
    stock = mace.build(cfg, mace.neighbours(g), device="cuda")
    swapped = copy.deepcopy(stock)
    widths = mace.swap(swapped)
    f64 = copy.deepcopy(stock).double()
    columns = _columns(stock, swapped, lambda m: mace.energy_and_forces(m, g),
                       lambda m: mace.for_compile(m, cfg, mace.neighbours(g), device="cuda"))
    try:
        fast = mace.accelerated(copy.deepcopy(stock))
        road = lambda: mace.energy_and_forces(fast, g)  # noqa: E731
    except Exception as e:  # noqa: BLE001 - the library's road is a column where it installs, said where not
        road = _refusing(f"no cuEquivariance road: {type(e).__name__}: {e}")
    columns = with_eager(columns, "accelerated", road)
    receivers = g["edge_index"][1]
    replaced = [(_sum_call(receivers, n_atoms, F, False, _mace_scatter), _sum_call(receivers, n_atoms, F, True), 1)
                for F in widths]
    E = receivers.numel()
    return Case("mace", f"atoms={n_atoms},edges={E},cutoff={cfg['r_max']}", "fp32", columns,
                lambda: mace.energy_and_forces(f64, g), replaced,
                swap=f"replaced {len(widths)} message sums (widths {widths} floats per edge)")
