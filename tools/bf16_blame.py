"""Which bf16 rounding makes the GPU MODE task's verdict fail at bf16: the task's form of the triangle
update computed in float64 with one intermediate at a time rounded to bf16 (to nearest even, as a bf16
store does; every product in float64, as a tensor core's FP32 accumulator is for these purposes), and with
all of them rounded, as eager PyTorch stores them. Each variant is judged as the task judges: every
element within rtol = atol = 2e-2 of the FP32 reference of the same bf16 inputs.

Runs on the CPU (float64, minutes at the task's smallest shapes):

    python3 tools/bf16_blame.py --out data/numerics/bf16_blame.csv --seeds 2 --shapes 0 2
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: kernels, mage

from kernels.trimul_gpumode.spec import SPEC, _layernorm, contest_failures  # noqa: E402
from mage import env, ops  # noqa: E402

# the intermediates a bf16 implementation stores, in the order the update makes them
STAGES = ("xn", "projections", "a_b", "o", "ln_o", "gate", "gated", "out")


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).double()


def update(inputs, rounded: set) -> torch.Tensor:
    """The task's form in float64, rounding to bf16 after each stage named in ``rounded`` ('eager': after
    every operation, as the task's module run in bf16 stores each result)."""
    x, mask, nw, nb, lp, rp, lg, rg, og, onw, onb, to_out = (t.double() for t in inputs)
    e = "eager" in rounded
    r = lambda name, t: _bf16(t) if name in rounded or e else t  # noqa: E731
    q = lambda t: _bf16(t) if e else t  # noqa: E731 - a result only eager stores
    xn = r("xn", _layernorm(x, nw, nb))
    left, right, gl, gr, go = (r("projections", xn @ w.T) for w in (lp, rp, lg, rg, og))
    m = mask[..., None]
    a = r("a_b", q(q(left * m) * q(torch.sigmoid(gl))))
    b = r("a_b", q(q(right * m) * q(torch.sigmoid(gr))))
    o = r("o", torch.einsum("bikh,bjkh->bijh", a, b))
    gated = r("gated", r("ln_o", _layernorm(o, onw, onb)) * r("gate", torch.sigmoid(go)))
    return r("out", gated @ to_out.T)


def rows(shapes, seeds: int, log) -> list[dict]:
    out = []
    for shape in shapes:
        for dist in ("normal", "heavy"):
            for seed in range(seeds):
                inputs = SPEC.inputs(shape, seed=1000 + seed, dtype="bf16", dist=dist)  # the column's inputs
                ref32 = update(inputs, set()).float()
                for variant in ("none", *STAGES, "all", "eager"):
                    rounded = set(STAGES) if variant == "all" else set() if variant == "none" else {variant}
                    y = update(inputs, rounded)
                    err = (y - ref32.double()).abs()
                    worst = int(err.argmax())
                    out.append(dict(shape=ops.shape_key(shape), dist=dist, seed=seed, rounded=variant,
                                    failures=contest_failures(y, ref32), elements=y.numel(),
                                    max_abs_error=float(err.max()), ref_at_worst=float(ref32.flatten()[worst])))
                log(f"{ops.shape_key(shape)} {dist} {seed}: " + ", ".join(
                    f"{r['rounded']} {r['failures']}" for r in out[-len(STAGES) - 3:]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="CSV to write (its environment beside it, .json)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--shapes", type=int, nargs="+", default=[0, 2], help="indices into the task's shapes")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t0 = time.time()
    shapes = [SPEC.shapes["contest"][i] for i in a.shapes]
    df = pd.DataFrame(rows(shapes, a.seeds, lambda s: print(f"[{time.time() - t0:.0f}s] {s}", flush=True)))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    out.with_suffix(".json").write_text(pd.Series(env.environment(" ".join(sys.argv))).to_json(indent=1))
    print(df.groupby("rounded", sort=False)[["failures"]].agg(["sum", lambda f: int((f > 0).sum())]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
