"""A training step of a model block: forward, backward and an AdamW update of the block's weights,
timed as steps and items (tokens, pairs, nodes) per second, for every implementation with a training
path (``registry.train_fn``), in FP32 and in bf16 mixed precision (autocast to bf16, the weights and
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

import json
import statistics
import time
from pathlib import Path

import torch

from . import ops, passes, registry
from .errors import MageInputError

FILE = "train.csv"
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
        args = list(impl.prepare(*raw) if impl.prepare else raw)
        self.params = [torch.nn.Parameter(args[i].detach().clone()) for i in weights]
        for i, p in zip(weights, self.params):
            args[i] = p
        args[first] = args[first].detach().requires_grad_(True)
        self.args, self.fn, self.items, self.first = args, fn, items_per_step(raw[first]), first
        self.amp, self.device = precision == "bf16", device
        # a graphed step keeps the optimizer's step count on the device (capturable), or the replay would
        # reuse the count the capture saw
        self.graphed, self.graph = graphed and device == "cuda", None
        self.opt = torch.optim.AdamW(self.params, lr=LR, weight_decay=WEIGHT_DECAY, fused=device == "cuda",
                                     capturable=self.graphed)  # one pass over all weights, as trainers use
        with torch.enable_grad(), self._autocast():
            out = fn(*self.args)
        self.g = passes.grad_out_like(out, seed + 1)  # in the output's dtype under this precision
        self.parts, self.record = [], False
        if device == "cuda":
            self._event = torch.cuda.Event
        else:  # the host's clock in the events' interface, so the step's bookkeeping runs in CPU tests
            from .service_gpu import HostEvent
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


def _config(precision, shape_set="") -> str:
    """What a step ran with, recorded with every row (and the spec's shape set the shape came from)."""
    c = {"optimizer": "AdamW(fused)", "lr": LR, "weight_decay": WEIGHT_DECAY, "master": "fp32",
         "compute": "autocast bf16" if precision == "bf16" else "fp32"}
    return json.dumps(dict(c, shapes=shape_set) if shape_set else c, sort_keys=True)


def measure(out_dir, op_names, impl_names=None, shape_sets=("field",), precisions=PRECISIONS, steps=60, iters=20,
            seed=0, command="", pin=True, force_machine=False, log=None):
    """Every selected (block, shape, precision): the columns' steps take turns; rows into ``out_dir/FILE``."""
    import pandas as pd

    from .data import IDENTITY, add_new_run, ensure_same_machine, merge_csv
    from .env import clock_warnings, clocks, environment
    from .measure import stderr_log
    from .profile import profile
    from .session import new_run_id, steady_process
    from .timing import SpanPlan, spans

    log = log or stderr_log
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise MageInputError("train", "--precisions", f"must be among {list(PRECISIONS)}, got {bad}")
    out_dir = Path(out_dir)
    registry.load()
    env = environment(command)
    ensure_same_machine(out_dir, env, force=force_machine)
    env["process"] = steady_process(pin)
    plan = SpanPlan.make(steps, 3, 5, warmup=3, warm_s=0.05)
    env["protocol"] = dict(train=dict(steps=steps, profiled_steps=iters, seed=seed, optimizer=_config("fp32"),
                                      span_plan=json.loads(plan.to_json())))
    run = add_new_run(out_dir, new_run_id, env)
    all_rows = []
    for name in op_names:
        spec = ops.get(name)
        for shape_set in shape_sets:
            for shape in spec.shapes[shape_set]:
                for precision in precisions:
                    rows = _case(spec, shape, shape_set, precision, impl_names, plan, iters, seed, run, log,
                                 profile, spans, clocks, clock_warnings)
                    if rows:
                        merge_csv(pd.DataFrame(rows), out_dir / FILE, IDENTITY)
                    all_rows += rows
                    torch.cuda.empty_cache()
    return run, all_rows


def _case(spec, shape, shape_set, precision, impl_names, plan, iters, seed, run, log, profile, spans, clocks,
          clock_warnings, device="cuda"):
    """The rows of one (block, shape, precision): every column with a training path, checked, warmed, then
    profiled and spanned, the columns taking turns. The GPU's tools come as arguments (tests fake them)."""
    from .timing import summarize
    key = ops.shape_key(shape)
    steps = {}
    # the FP32 columns are the training paths; bf16 mixed precision runs them under autocast
    for im in registry.impls(spec.name, names=impl_names, dtype="fp32"):
        fn = registry.train_fn(im)
        if fn is None or im.runs_on(device):
            log(f"  {spec.name} {im.name} {key}: " + ("no training path" if fn is None else im.runs_on(device)))
            continue
        if precision == "bf16" and not registry.follows_autocast(im):  # it would compute FP32 under a bf16 label
            log(f"  {spec.name} {im.name} {key}: its training path does not follow autocast: no bf16 row")
            continue
        # the path's FP32 gradients checked first (for either precision: autocast runs the same path),
        # as a forward is checked before it is timed
        c = passes.grad_check(im, fn, shape, seed=seed + 29, device=device)
        if not c.passed:
            log(f"  refusing to train {spec.name} {im.name} {key}: {c.reason}")
            continue
        t0 = time.perf_counter()
        try:
            step = Step(spec, im, fn, shape, precision, seed=seed, device=device,
                        graphed=registry.step_graphed(im))
            why = step.verify()
            for _ in range(2):  # compilation (torch.compile's backward, CUDA graph recording) lands here
                step()
            _sync(device)
        except Exception as e:  # noqa: BLE001 - one column failing must not lose the others
            log(f"  {spec.name} {im.name} {precision} {key}: cannot train: {type(e).__name__}: {e}")
            continue
        if why:
            log(f"  refusing to time {spec.name} {im.name} {precision} {key}: {why}")
            continue
        log(f"  {spec.name} {im.name} {precision} {key}: ready in {time.perf_counter() - t0:.1f} s")
        steps[im.name] = im, step  # keyed by name: an Impl holds dicts and does not hash
    if not steps:
        return []
    # shape set 'train': a step's rows never stand among the calls' rows of the field and large sets
    base = dict(op=spec.name, dtype=precision, shape=key, shape_set="train", cache="warm", run=run,
                source="measured", config=_config(precision, shape_set), **{"pass": "step"})
    rows = []
    for im, step in steps.values():
        p = profile(step, iters=iters)
        r = dict(base, impl=im.name, family=im.family, round=0, stat="mean", kernel_names="|".join(p.kernel_names),
                 flags=";".join(p.flags))
        rows += [dict(r, view="kernel_time", value=p.kernel_us, unit="us"),
                 dict(r, view="launches", value=p.launches, unit="count")]
    readings = []
    for _, step in steps.values():
        step.record = True
    sp = spans({n: step for n, (_, step) in steps.items()}, plan=plan, between=lambda r: readings.append(clocks()))
    flags = ";".join(clock_warnings(readings))
    for im, step in steps.values():
        step.record = False
        r = dict(base, impl=im.name, family=im.family, round=0)
        whole = summarize([x for rnd in sp.samples[im.name] for x in rnd])
        for rnd, samples in enumerate(sp.samples[im.name], start=1):
            rows.append(dict(r, view="train_step", round=rnd, stat="mean", value=statistics.fmean(samples), unit="us"))
        for stat in ("n", "mean", "median", "p10", "p90", "min", "max"):
            rows.append(dict(r, view="train_step", stat=stat, value=whole[stat], unit="us", flags=flags))
        rows.append(dict(r, view="throughput", stat="mean", value=step.items / (whole["mean"] * 1e-6), unit="items/s",
                         stage=f"items per step: {step.items}"))
        host = [h for rnd in sp.host.get(im.name, []) for h in rnd]
        if host:
            rows.append(dict(r, view="host_time", stat="mean", value=statistics.fmean(host), unit="us"))
        for part, us in step.part_times().items():
            rows.append(dict(r, view="train_part", stat="mean", value=us, unit="us", stage=part))
    return rows


def summary(rows) -> str:
    """One line per (block, shape, precision, implementation): step time, items per second, the parts."""
    import pandas as pd
    df = pd.DataFrame(rows)
    if df.empty:
        return "(no rows)"
    top = df[(df["round"] == 0) & (df["stat"] == "mean")].copy()
    stage = top["stage"].fillna("") if "stage" in top.columns else ""
    top["col"] = top["view"].where(top["view"] != "train_part", "part:" + stage)
    t = top.pivot_table(index=["op", "shape", "dtype", "impl"], columns="col", values="value", aggfunc="first")
    return t.to_string(float_format=lambda v: f"{v:.4g}")
