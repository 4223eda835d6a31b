"""Host time per LayerNorm layer inside a torch.compile graph, three ways, on one CUDA GPU:

    python3 tools/probe_compiled_host.py [--layers 48] [--calls 200]

- ``kernel_op``: the project's operator as it is registered (``kernels._triton.operator``: the compiler
  sees the kernel and launches it from its generated code);
- ``custom_op``: the same function behind an opaque ``torch.library.custom_op`` (how the operator was
  registered before; the compiled graph calls back into our Python launcher);
- ``inductor``: ``F.layer_norm``, which Inductor generates and launches itself.

A graph of ``--layers`` layers, each a LayerNorm whose input is added back (as a residual stream does),
at a size small enough (64 rows of 1024) that the GPU waits for the host: the wall time of a burst of
calls, divided by calls and layers, is the host's cost of one layer (for the first two: our LayerNorm's
launch and the add's; Inductor may fuse its own rows further, and no launches are counted here). Medians of
five bursts. The host is shared: read the three against each other, in one run, not against another run.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from kernels.layernorm import triton_kernel as LN


@torch.library.custom_op("mage_probe::opaque_layernorm", mutates_args=())
def _opaque(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return LN.layernorm(x, g, b, eps=1e-6)


@_opaque.register_fake
def _(x, g, b):
    return x.new_empty(x.shape)


WAYS = {
    "kernel_op": lambda x, g, b: torch.ops.mage.triton_layernorm(x, g, b, 1e-6),
    "custom_op": lambda x, g, b: torch.ops.mage_probe.opaque_layernorm(x, g, b),
    "inductor": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, 1e-6),
}


def _graph(norm, layers):
    def f(x, g, b):
        for _ in range(layers):
            x = x + norm(x, g, b)
        return x
    return torch.compile(f, fullgraph=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args(argv)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    g, b = torch.randn(1024, device="cuda", dtype=x.dtype), torch.randn(1024, device="cuda", dtype=x.dtype)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {a.layers} LayerNorms a graph, "
          f"{a.calls} calls a burst")
    with torch.inference_mode():
        for name, norm in WAYS.items():
            f = _graph(norm, a.layers)
            for _ in range(5):
                f(x, g, b)
            torch.cuda.synchronize()
            per = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    f(x, g, b)
                torch.cuda.synchronize()
                per.append((time.perf_counter() - t0) / a.calls / a.layers * 1e6)
            print(f"{name:10s} {statistics.median(per):6.1f} us a layer (bursts {min(per):.1f}-{max(per):.1f})")


if __name__ == "__main__":
    main()
