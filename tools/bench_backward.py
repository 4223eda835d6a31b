"""A development sweep of the memory-bound backward kernels' configs (bias + GELU, LayerNorm), without
plotting or notebook imports:

    python3 -m tools.bench_backward OUT_DIR   # from the repository root

For each operation at its large and field shapes, every config below is first checked against float64
(dx and the column sums, relative error in norm against the tolerance the harness gives gradients),
then timed: CUDA events around 20 back-to-back calls, median of 5 such batches, microseconds a call
(at these sizes the launch gaps are a few percent at most). Prints one line per config and writes
``backward_sweep.json`` in OUT_DIR. Not the record: the harness's rows come from ``mage measure``; this
picks the defaults the next record runs, and its numbers go to kernels/NOTES.md as a development run.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

from tests.support import kernel_checks as testing
from mage import ops
from mage.ext.training import passes

SHAPES = {"layernorm": [dict(R=32768, C=4096), dict(R=1024, C=1024)],
          "bias_gelu": [dict(R=16384, C=8192), dict(R=2048, C=512)]}
CONFIGS = {
    "layernorm": [{}] + [dict(ROWS=r, BLOCK_R=1, num_warps=w) for r in (8, 16, 32, 64) for w in (4, 8, 16)]
    + [dict(ROWS=r, BLOCK_R=2, num_warps=w) for r in (16, 64) for w in (8, 16)]
    + [dict(ROWS=r) for r in (1, 2, 4, 8)],
    "bias_gelu": [{}] + [dict(ROWS=r, BLOCK_R=br, BLOCK_C=bc, num_warps=w) for r in (16, 32, 64, 128)
                         for br, bc, w in ((4, 512, 4), (8, 512, 8), (2, 1024, 4), (4, 1024, 8))]
    + [dict(ROWS=r) for r in (4, 8, 16)],
}


def _setup(op, shape):
    spec = ops.get(op)
    raw = spec.inputs(shape, seed=7, device="cuda")
    g = torch.randn(raw[0].shape, device="cuda", generator=torch.Generator("cuda").manual_seed(8))
    want = testing.reference_grads(op, raw, g)  # float64 autograd through the spec's reference
    if op == "layernorm":
        from kernels.layernorm.triton_backward import layernorm_backward
        x, gamma, beta = raw
        _, mean, rstd = torch.ops.mage.triton_layernorm_train(x, gamma, beta)
        return (lambda **cfg: layernorm_backward(x, gamma, mean, rstd, g, **cfg)), want, spec
    from kernels.bias_gelu.triton_backward import bias_gelu_backward
    x, b = raw
    return (lambda **cfg: bias_gelu_backward(x, b, g, **cfg)), want, spec


def _time(fn, calls=20, batches=5) -> float:
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(out)


def main(out_dir: str) -> None:
    rows = []
    for op, shapes in SHAPES.items():
        for shape in shapes:
            fn, want, spec = _setup(op, shape)
            tol = spec.tol("fp32") * passes.GRAD_TOL_FACTOR
            for cfg in CONFIGS[op]:
                row = dict(op=op, shape=ops.shape_key(shape), config=cfg)
                try:
                    got = fn(**cfg)
                    err = max(float((a.double() - w).norm() / w.norm()) for a, w in zip(got, want))
                    row.update(error=err, passed=err <= tol)
                    if row["passed"]:
                        row["us"] = _time(lambda: fn(**cfg))
                except Exception as e:  # noqa: BLE001 - a refused or failing config is a row, not the end
                    row.update(passed=False, reason=f"{type(e).__name__}: {e}"[:200])
                rows.append(row)
                print(f"{op:10s} {row['shape']:16s} {json.dumps(cfg):60s} "
                      f"{row.get('us', float('nan')):9.1f} us  err {row.get('error', float('nan')):.2e}"
                      f"{'' if row['passed'] else '  FAILED ' + row.get('reason', '')}", flush=True)
            del fn, want
            torch.cuda.empty_cache()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "backward_sweep.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
