"""Host cost of the Triton launchers' Python, piece by piece, without plotting or notebook imports:

    python3 -m tools.bench_host [--device cuda|cpu] [--ops matmul ...] [--calls N]

For each operation at its field shape (and each precision of its Triton column) it prints, in
microseconds per call (median of batches, ``mage.ext.launch_path.breakdown.per_call_us``):

- ``checks``: the spec's full validation plus the device check (what the launcher ran before the cut);
- ``fast checks``: the launcher's own check of the same facts (``_checked``), the path a good call takes;
- ``predicate``: the fast check's attribute reads alone (on a CPU, the best proxy for the CUDA path);
- ``alloc``: the output allocation as the launcher does it;
- ``launcher, launch stubbed``: the whole launcher with ``common.launch`` replaced by a no-op, i.e. all
  of the project's Python around the launch;
- ``lean key`` (CUDA only): the lean launch's key and look-up; ``whole call`` (CUDA only): the real call.

On a CPU (``--device cpu``, field sizes divided by 16) the kernels are never launched; the numbers are a proxy for the relative
cost of the pure-Python parts (the CUDA allocator and the driver are absent).
"""
from __future__ import annotations

import argparse
import contextlib
import os

import torch

from mage.ext.launch_path import breakdown as launch_path
from mage import ops, registry

from kernels._triton import common
from kernels._triton import launch as lean


@contextlib.contextmanager
def _stubbed_launch(seen: list | None = None):
    go = common.launch

    def stub(kernel, grid, *args, **kw):
        if seen is not None:
            seen.append((kernel, grid, args, kw))
    common.launch = stub
    try:
        yield
    finally:
        common.launch = go


def _module(op):
    import importlib
    return importlib.import_module(f"kernels.{op}.triton_kernel")


def bench(op: str, dtype: str, device: str, calls: int, batches: int, shrink: int = 1) -> dict:
    spec = ops.OPS[op]
    im = registry.get(op, "triton", dtype)
    shape = spec.shapes["field"][0]
    if shrink > 1:  # on a CPU: large host buffers go to the kernel's mmap, which would swamp the Python;
        # the smaller shape runs with the field shape's config (given as overrides, a slightly longer key)
        im = im.variant(**im.config_for(shape))
        shape = {k: max(v // shrink, 1) if isinstance(v, int) else v for k, v in shape.items()}
    inputs = spec.inputs(shape, seed=0, device=device, dtype=dtype)
    inputs = im.prepare(*inputs) if im.prepare else inputs
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    mod = _module(op)
    named = dict(zip(spec.args, inputs))
    res = {}

    def t(name, fn):
        res[name] = launch_path.per_call_us(fn, sync, calls, batches)["median"]

    t("checks", lambda: (spec.validate(*inputs), common.on_device(op, named)))
    checked = getattr(mod, "_checked", None)
    if checked is not None:  # on a CPU the fast path never applies (it needs CUDA tensors): see 'predicate'
        t("fast checks", lambda: checked(*inputs))
        t("predicate", lambda: mod._good(*inputs))
    t("alloc", lambda: spec.empty_out(*inputs))
    seen = []
    with _stubbed_launch(seen):
        im.fn(*inputs)
        t("launcher, launch stubbed", lambda: im.fn(*inputs))
    if device == "cuda" and seen:
        kernel, grid, args, kw = seen[0]
        im.fn(*inputs)  # a real launch, so the lean entry exists
        sync()
        key = kernel._mage_lean.key
        t("lean key", lambda: kernel._mage_lean.entries.get(key(lean._current_device(), args, kw)[0]))
        t("lean launch", lambda: lean.launch(kernel, grid, *args, **kw))
        t("whole call", lambda: im.fn(*inputs))
        base = registry.get(op, registry.role("baseline"), "fp32")
        b_in = spec.inputs(shape, seed=0, device=device, dtype="fp32")
        b_in = base.prepare(*b_in) if base.prepare else b_in
        t("eager fp32 whole call", lambda: base.fn(*b_in))
    return res


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ops", nargs="+", default=["matmul", "bias_gelu", "layernorm", "triangle"])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--batches", type=int, default=15)
    p.add_argument("--shrink", type=int, default=None,
                   help="divide the field shape's sizes by this (default: 1 on CUDA, 16 on a CPU)")
    a = p.parse_args(argv)
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # the launchers accept CPU tensors only for the interpreter
    registry.load()
    for op in a.ops:
        for im in registry.impls(op, ["triton"]):
            if im.dtype == "bf16" and a.device == "cpu":
                continue
            shrink = a.shrink or (16 if a.device == "cpu" else 1)
            res = bench(op, im.dtype, a.device, a.calls, a.batches, shrink)
            print(f"{op:>10} {im.dtype:<6} " + "  ".join(f"{k}={v:.2f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
