"""A training step of a model block: forward, backward and an AdamW update of the block's weights,
timed as steps and items (tokens, pairs, nodes) per second, for every implementation with a training
path (``paths.train_fn``), in FP32 and in bf16 mixed precision (autocast to bf16, the weights and
the optimizer's state kept in FP32: the master weights).

What the step holds, from the spec alone (``mage`` names no block):
- weights: the floating inputs whose shape does not change along the size sweep (``spec.shapes['sweep']``
  varies the batch: tokens, residues, nodes); each becomes an FP32 parameter the optimizer updates.
- activations: the inputs that grow with the batch. The first floating one (the block's input features)
  requires its gradient, as it does for a block inside a network; the others (a mask, a graph) do not.
- items per step: the activations' leading dimensions, all but the last (features): T tokens for
  x [T, d], N x N pairs for z [N, N, C], n nodes for h [n, F].
- loss: the output's gradient is a fixed seeded tensor (``out.backward(g)``), the same for every column.

The steps are timed by the harness's span protocol (``timing.spans`` with a ``SpanPlan``): the
implementations take turns, rounds rotate, one event span per step with the host's time inside it.
Each step also records three CUDA events (after forward, after backward, after the update) with no
synchronisation between them, giving each part's share of the GPU timeline (``train_part`` rows).
A profile of ``iters`` steps gives kernel time and launches per step.
"""
from __future__ import annotations

import statistics

import torch

from mage.errors import MageInputError
from mage.ext.training import passes, paths

PRECISIONS = ("fp32", "bf16")
LR, WEIGHT_DECAY = 1e-4, 1e-2
PARTS = ("forward", "backward", "optimizer")


_ROLES: dict = {}


def roles(spec, shape, device="cpu"):
    """(weight positions, activation positions, items per step) of ``spec`` at ``shape``; see the module
    docstring. The shapes compared are the size sweep's first two (its smallest), made on the CPU once
    per block: a graph block's inputs take tens of seconds to build on a slow host (the H200 run spent
    37 s a column preparing the message-passing block), and the answer depends on the spec alone."""
    key = (spec.name, id(spec))
    if key not in _ROLES:
        _ROLES[key] = _roles(spec, device)
    return _ROLES[key]


def _roles(spec, device):
    sweep = spec.shapes.get("sweep") or []
    if len(sweep) < 2:
        raise MageInputError("train", spec.name, "needs two sweep shapes to tell its weights from its activations")
    a, b = (spec.inputs(s, seed=0, device=device) for s in sweep[:2])  # the sweep's two smallest
    weights, acts = [], []
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.shape == y.shape:
            weights.append(i)
        else:
            acts.append(i)
    first = next((i for i in acts if isinstance(a[i], torch.Tensor) and a[i].is_floating_point()), None)
    if first is None or not weights:
        raise MageInputError("train", spec.name, "has no floating activation or no weights to train")
    return weights, acts, first


def items_per_step(x) -> int:
    n = 1
    for d in x.shape[:-1]:
        n *= int(d)
    return n


class Step:
    """One implementation's training step on one input set: call it to run a step. ``parts`` collects
    (forward, backward, optimizer) event triples for ``part_times``."""

    def __init__(self, spec, impl, fn, shape, precision, seed=0, device="cuda", graphed=False):
        weights, _, first = roles(spec, shape)
        raw = spec.inputs(shape, seed=seed, device=device, dtype="fp32")
        prepare = paths.train_prepare(impl)
        args = list(prepare(*raw) if prepare else raw)
        self.params = [torch.nn.Parameter(args[i].detach().clone()) for i in weights]
        for i, p in zip(weights, self.params):
            args[i] = p
        args[first] = args[first].detach().requires_grad_(True)
        self.args, self.fn, self.items, self.first = args, fn, items_per_step(raw[first]), first
        self.amp, self.device = precision == "bf16", device
        # a graphed step keeps the optimizer's step count on the device (capturable), or the replay would
        # reuse the count the capture saw
        self.graphed, self.graph = graphed and device == "cuda", None
        self.keep, self.kept = paths.train_keep(impl), None
        self.opt = torch.optim.AdamW(self.params, lr=LR, weight_decay=WEIGHT_DECAY, fused=device == "cuda",
                                     capturable=self.graphed)  # one pass over all weights, as trainers use
        with torch.enable_grad(), self._autocast():
            out = fn(*self.args)
        self.g = passes.grad_out_like(out, seed + 1)  # in the output's dtype under this precision
        self.parts, self.record = [], False
        if device == "cuda":
            self._event = torch.cuda.Event
        else:  # the host's clock in the events' interface, so the step's bookkeeping runs in CPU tests
            from mage.ext.service.gpu import HostEvent
            self._event = HostEvent

    def _autocast(self):
        # autocast's cache of bf16 weight copies would be freed after the capture that filled it
        return torch.autocast(device_type=self.device, dtype=torch.bfloat16, enabled=self.amp,
                              cache_enabled=not self.graphed)

    def __call__(self):
        if self.graphed:
            return self._replay()
        events = [self._event(enable_timing=True) for _ in range(4)] if self.record else None
        if events:
            events[0].record()
        self._zero()
        with torch.enable_grad(), self._autocast():
            out = self.fn(*self.args)
        if events:
            events[1].record()
        out.backward(self.g)
        if events:
            events[2].record()
        self.opt.step()
        if events:
            events[3].record()
            self.parts.append(events)
        return out

    def _zero(self):
        self.opt.zero_grad(set_to_none=True)
        self.args[self.first].grad = None

    def _replay(self):
        """The whole step as one CUDA graph: recorded on the first call, replayed on every call. The parts
        are not split (an event inside a graph is not timed), so a graphed column has no part rows."""
        if self.graph is None:
            self._capture()
        self.graph.replay()
        return self.out

    def _capture(self):
        """PyTorch's whole-network capture: a few eager steps on a side stream (Triton's compilation,
        the optimizer's state, the autograd plans), the gradients set to None so the captured backward
        allocates them from the graph's pool and writes them (no accumulation on replay), then one step
        recorded."""
        main, side = torch.cuda.current_stream(), torch.cuda.Stream()
        side.wait_stream(main)
        graphed, self.graphed = self.graphed, False
        try:
            with torch.cuda.stream(side):
                for _ in range(3):
                    self()
        finally:
            self.graphed = graphed
        main.wait_stream(side)
        self._zero()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            with torch.enable_grad(), self._autocast():
                out = self.fn(*self.args)
            out.backward(self.g)
            self.opt.step()
        self.graph, self.out = graph, out
        self.kept = self.keep(*self.args) if self.keep else None  # memo entries the replays read

    def part_times(self) -> dict:
        """Mean microseconds of each part over the recorded steps (read after a synchronisation)."""
        _sync(self.device)
        out = {p: statistics.fmean(e[k].elapsed_time(e[k + 1]) * 1e3 for e in self.parts)
               for k, p in enumerate(PARTS)} if self.parts else {}
        self.parts = []
        return out

    def verify(self) -> str:
        """'' when one step leaves finite weights that moved; else what is wrong."""
        if self.graphed and self.graph is None:
            self()  # the capture's eager steps move the weights: the replay is what is checked
            _sync(self.device)
        before = [p.detach().clone() for p in self.params]
        self()
        _sync(self.device)
        if not all(torch.isfinite(p).all() for p in self.params):
            return "a step left non-finite weights"
        if not any((p != b).any() for p, b in zip(self.params, before) if p.numel()):
            return "a step left every weight unchanged"
        return ""


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()
