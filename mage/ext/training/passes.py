"""The backward passes of a measurement (``mage.hooks``: the core's one pass is ``forward``, the
implementation's own call): what one timed call of each does.

- ``backward``: the gradients of the output with respect to every floating input, alone. The forward
  runs once per input set outside every timed region, its graph kept, and each timed call is
  ``torch.autograd.grad(out, inputs, grad_out, retain_graph=True)``: the same graph walked again, so the
  call holds the backward's kernels and nothing else.
- ``both``: forward and backward in one call, as a training step runs them.

Backward and both run through the implementation's training path (``paths.train_fn``): PyTorch
columns are their own; any other column must declare one (``paths``). Each call here is a zero-argument
callable, so the harness's one loop (profile, graph replay, the SpanPlan's spans) times it exactly as it
times a forward call; ``TrainingPasses`` is the hook that plugs them into that loop.

Before any of it is timed, ``grad_check`` compares the path's gradients with float64 autograd of the
spec's reference, as ``mage.check`` does for the output.
"""
from __future__ import annotations

import math

import torch

from mage import facets, ops
from mage.check import CheckResult, rel_error
from mage.errors import MageInputError
from mage.ext.training import paths
from mage.hooks import add_pass
from mage.timing import graph_span

# Gradients are sums over the other axes (a bias's gradient sums T rows; a weight's is a GEMM over T), so
# their rounding grows with those sums where the forward's did not: held to this multiple of the
# forward's tolerance, still far below what a wrong term or index gives (an error of order 1).
GRAD_TOL_FACTOR = 4.0


def allow_repeated_backward(passes) -> None:
    """Before anything is compiled: when a backward pass is measured, compiled columns keep their saved
    tensors for the whole backward instead of donating them to its outputs. ``backward`` walks one graph
    many times (``retain_graph=True``); a backward compiled with donated buffers refuses that (on the H200
    it did, for LayerNorm and the neighbour aggregation). Donation saves memory, not kernel work: the
    backward's kernels are the same. ``both`` runs under the same setting, so the two passes compare."""
    if "backward" in passes:
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False


def floating(args) -> list[int]:
    """Positions of the dense floating tensors among ``args``: what backward differentiates with respect
    to. A sparse matrix built in prepare holds a graph's structure with its weights, as a graph object
    does, and is left alone like one."""
    return [i for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.layout == torch.strided]


def leaves(args) -> tuple[list, list]:
    """The arguments with every floating tensor made a leaf that requires its gradient (sharing storage
    with the original), and those leaves."""
    args = list(args)
    for i in floating(args):
        args[i] = args[i].detach().requires_grad_(True)
    return args, [args[i] for i in floating(args)]


def grad_out_like(out: torch.Tensor, seed: int) -> torch.Tensor:
    """A seeded gradient of the output, of its shape, dtype and device (O(1) values, as a loss gives)."""
    gen = torch.Generator(device=out.device).manual_seed(seed)
    return torch.randn(out.shape, generator=gen, device=out.device).to(out.dtype)


def _grad(out, wrt, g, retain):
    # allow_unused: an input a path does not differentiate (a graph's structure) gets no gradient
    return torch.autograd.grad(out, wrt, g, retain_graph=retain, allow_unused=True)


class PassSet:
    """One input set of one implementation, ready for a pass: leaves, and for ``backward`` the forward
    already run with its graph kept."""

    def __init__(self, fn, args, pass_: str, seed: int):
        self.fn, self.pass_ = fn, pass_
        self.args, self.wrt = leaves(args) if pass_ != "forward" else (list(args), [])
        self.out = self.g = None
        if pass_ != "forward":
            with torch.enable_grad():
                out = fn(*self.args)
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                raise MageInputError("measure", "pass", f"{pass_}: the training path's output does not require "
                                     "a gradient (no input's gradient flows through it)")
            self.g = grad_out_like(out, seed)
            self.out = out if pass_ == "backward" else None  # both: a fresh forward every call

    def __call__(self):
        if self.pass_ == "forward":
            return self.fn(*self.args)
        if self.pass_ == "backward":
            return _grad(self.out, self.wrt, self.g, True)
        with torch.enable_grad():
            return _grad(self.fn(*self.args), self.wrt, self.g, False)


def grad_check(impl, fn, shape: dict, seed: int, device: str = "cuda") -> CheckResult:
    """The training path's gradients against float64 autograd of the reference, on one fresh input set
    (relative error in norm, over every floating input whose gradient both give); never raises."""
    spec = ops.get(impl.op)
    tol = spec.tol(impl.dtype) * GRAD_TOL_FACTOR
    res = CheckResult(impl.op, impl.name, impl.dtype, ops.shape_key(shape), "grad", math.nan, tol, False, 1)
    try:
        raw = spec.inputs(shape, seed=seed, device=device, dtype=impl.dtype)
        prepare = paths.train_prepare(impl)
        args = prepare(*raw) if prepare else raw
        # the positions both sides differentiate: a floating input the path receives as it is
        pos = [i for i in floating(raw) if i < len(args) and isinstance(args[i], torch.Tensor)
               and args[i].shape == raw[i].shape and args[i].is_floating_point()]
        args, _ = leaves(args)
        with torch.enable_grad():
            out = fn(*args)
            g = grad_out_like(out, seed + 1)
            got = _grad(out, [args[i] for i in pos], g, False)
            ref_args, _ = leaves([a.double() if i in pos else a for i, a in enumerate(raw)])
            ref_out = spec.reference(*ref_args)
            want = _grad(ref_out, [ref_args[i] for i in pos], g.double(), False)
    except Exception as e:  # noqa: BLE001 - a raising path is a failed check, with its message
        res.error, res.reason = math.inf, f"raised {type(e).__name__}: {e}"
        return res
    worst, why = 0.0, ""
    for i, a, b in zip(pos, got, want):
        if b is None:
            continue  # the reference does not depend on it either
        err = math.inf if a is None else rel_error(a, b)
        if not err <= worst:
            worst, why = err, f"gradient of {spec.args[i] if i < len(spec.args) else i}"
    res.error = worst
    if not worst <= tol:
        res.reason = f"{why}: relative error {worst:.3g} > {tol:.0e}" + (" (none given)" if worst == math.inf else "")
        return res
    res.passed = True
    return res


def grad_cost(spec, shape: dict, dtype: str = "fp32", inputs=None) -> tuple:
    """(FLOPs, compulsory bytes) of the backward at ``shape`` (given ``inputs``, at their actual sizes), from
    the operation's ``grad_flops`` and ``grad_bytes`` facets; (None, None) where it states none. grad_flops(shape)
    counts the gradients of every floating input; grad_bytes(shape, itemsize) what backward must read (the
    saved tensors and the output's gradient) and write (the inputs' gradients)."""
    grad_flops, grad_bytes = facets.get(spec, "grad_flops", None), facets.get(spec, "grad_bytes", None)
    if grad_flops is None or grad_bytes is None:
        return None, None
    shape = spec.cost_shape(shape, inputs)
    return grad_flops(shape), grad_bytes(shape, ops.itemsize(dtype))


def pass_cost(spec, shape, dtype, probe, pass_):
    """(FLOPs, bytes) of one call of ``pass_``: forward's, backward's (``grad_cost``), or both summed."""
    fwd = spec.cost(shape, dtype, inputs=probe)
    if pass_ == "forward":
        return fwd
    bwd = grad_cost(spec, shape, dtype, inputs=probe)
    if pass_ == "backward" or bwd[0] is None:
        return bwd
    return fwd[0] + bwd[0], fwd[1] + bwd[1]


def graph_of(one_set, pass_, fn, arg_sets, seed, kernel_us, repeat):
    """Microseconds per call of one pass replayed from a CUDA graph (``timing.graph_span``). A backward alone is captured on the stream its forward ran on (sets of
    its own, their forward run there), or its kernels would go to a stream outside the capture."""
    stream = None
    if pass_ == "backward":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            one_set = [PassSet(fn, a, pass_, seed + 31 + i) for i, a in enumerate(arg_sets)]
    g = graph_span(one_set, replays=20 if kernel_us < 1000 else 5, repeat=repeat, stream=stream)
    if pass_ != "forward" and g < 0.5 * kernel_us:
        # the replay cannot beat the call's own kernels by that much: the graph missed the work
        raise RuntimeError(f"replay {g:.3g} us < half the kernel time {kernel_us:.3g} us: the work was not captured")
    return g


class TrainingPasses:
    """The hook (``mage.hooks``) through which backward and both join the one measurement loop: only
    columns with a training path whose gradients pass ``grad_check`` are timed."""

    def start(self, passes):
        allow_repeated_backward(passes)

    def admit(self, im, shape, st, log, checks) -> bool:
        key = ops.shape_key(shape)
        fn = paths.train_fn(im)
        if fn is None or paths.step_graphed(im):  # a graphed step is timed whole by mage.ext.training.train
            log(f"  no backward for {im.name} {key}: " + ("its training step is one CUDA graph (mage train)"
                                                          if fn else "it registers no training path"))
            return False
        c = grad_check(im, fn, shape, seed=st.seed + 29)
        checks.append({**c.row(), "run": st.run})
        if not c.passed:
            log(f"  refusing to time the backward of {im.name} {key}: {c.reason}")
        return c.passed

    def calls(self, im, arg_sets, pass_, seed):
        fn = paths.train_fn(im)
        return [PassSet(fn, a, pass_, seed + 31 + i) for i, a in enumerate(arg_sets)]

    def cost(self, spec, shape, dtype, probe, pass_):
        return pass_cost(spec, shape, dtype, probe, pass_)

    def graph_us(self, one_set, im, arg_sets, pass_, seed, kernel_us, repeat):
        return graph_of(one_set, pass_, paths.train_fn(im), arg_sets, seed, kernel_us, repeat)

    def protocol(self) -> dict:
        # what a backward call is: the forward outside the timed region
        return dict(backward="torch.autograd.grad(out, floating inputs, seeded grad_out, retain_graph=True)")


HOOK = TrainingPasses()
add_pass("backward", HOOK, "backward (the gradients alone, the forward untimed)")
add_pass("both", HOOK, "both")
