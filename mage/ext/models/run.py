"""Measure a model stock and with this project's kernels swapped in, on a GPU, and record the rows:
``python -m mage.ext.models.run --out data/h200`` (V-JEPA 2's encoder at 16 and 64 frames, FP32 and bf16).

Four columns per case: stock eager, stock under torch.compile, swapped eager, swapped under
torch.compile; each in the harness's views (kernel time and launches from a profile, event spans in
rotated rounds). Beside them: each kind of work's share of the stock kernel time, and Amdahl's
prediction for the swap, built from the same model's Linear and LayerNorm calls timed one by one, stock
and ours, at the shapes the model makes them. Accuracy: each column against the float64 model.
"""
from __future__ import annotations

import argparse
import copy
import re
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from mage import data, env
from mage.profile import profile
from mage.session import new_run_id
from mage.timing import spans

from . import swap as S
from . import vjepa2

# what a kernel's name says about its work; the first match wins, the rest is 'elementwise'
KINDS = (("attention", r"flash|fmha|attention|efficient_attention|sdpa"), ("layernorm", r"layer_?norm"),
         ("gemm", r"gemm|gemv|cutlass|nvjet|xmma|matmul|sm90_|sm80_"), ("gelu", r"gelu"), ("conv", r"conv"))
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}  # norm-wise against float64; the stock column's error is shown beside
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def kind_of(name: str) -> str:
    return next((k for k, pat in KINDS if re.search(pat, name, re.I)), "elementwise")


def calls_made(model, video) -> Counter:
    """(module kind, input shape, weight shape, eps or GELU) -> how many calls one forward makes."""
    seen = Counter()
    hooks = []
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.LayerNorm)):
            def hook(mod, args, _out):
                x = args[0]
                if isinstance(mod, nn.Linear):
                    seen[("linear", tuple(x.reshape(-1, x.shape[-1]).shape), tuple(mod.weight.shape), 0.0)] += 1
                else:
                    seen[("layernorm", tuple(x.reshape(-1, x.shape[-1]).shape), tuple(mod.weight.shape), mod.eps)] += 1
            hooks.append(m.register_forward_hook(hook))
    try:
        vjepa2.encode(model, video)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _one_call(kind, x_shape, w_shape, eps, dtype, ours: bool):
    dev = torch.device("cuda")
    x = torch.randn(x_shape, device=dev, dtype=dtype)
    w = torch.randn(w_shape, device=dev, dtype=dtype)
    b = torch.randn(w_shape[0], device=dev, dtype=dtype)
    if kind == "layernorm":
        mod = nn.LayerNorm(w_shape[0], eps=eps).to(dev, dtype)
        return (lambda: S.KernelLayerNorm(mod)(x)) if ours else (lambda: mod(x))
    lin = nn.Linear(w_shape[1], w_shape[0]).to(dev, dtype)
    return (lambda: S.KernelLinear(lin)(x)) if ours else (lambda: lin(x))


def amdahl(counts: Counter, dtype, stock_parts: dict, stock_total: float, iters: int) -> dict:
    """Kernel time of the calls the swap replaces, stock and ours (each call timed alone at its shape,
    times its count), and the predicted swapped total: the stock total with that time exchanged. The
    GELU is fused into its Linear by the swap: its stock time (the profile's 'gelu' share) goes too."""
    stock_calls = ours_calls = 0.0
    for (kind, xs, ws, eps), n in counts.items():
        stock_calls += n * profile(_one_call(kind, xs, ws, eps, dtype, False), iters=iters).kernel_us
        ours_calls += n * profile(_one_call(kind, xs, ws, eps, dtype, True), iters=iters).kernel_us
    replaced = stock_calls + stock_parts.get("gelu", 0.0)
    return dict(replaced_us=replaced, ours_us=ours_calls, predicted_us=stock_total - replaced + ours_calls,
                share=replaced / stock_total)


def _error(out, ref) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def measure_case(frames: int, dtype: str, config: dict, iters: int, n_spans: int, log) -> tuple[list, list]:
    stock = vjepa2.build(config, dtype=DTYPE[dtype], device="cuda")
    swapped = copy.deepcopy(stock)
    log(f"vjepa2 {frames} frames {dtype}: {S.swap(swapped)}")
    video = vjepa2.clip(stock, frames, device="cuda")
    cols = {"stock": lambda: vjepa2.encode(stock, video), "swapped": lambda: vjepa2.encode(swapped, video)}
    cstock, cswap = torch.compile(stock), torch.compile(swapped)
    cols["stock_compile"] = lambda: vjepa2.encode(cstock, video)
    cols["swapped_compile"] = lambda: vjepa2.encode(cswap, video)
    ref = vjepa2.encode(copy.deepcopy(stock).double(), video.double())
    shape = f"frames={frames},tokens={vjepa2.tokens(stock, frames)},batch=1"
    base = dict(op="vjepa2_encoder", dtype=dtype, shape=shape, shape_set="model", cache="warm", round=0)
    rows, checks, kernel = [], [], {}
    for name, fn in cols.items():
        err = _error(fn(), ref)
        checks.append(dict(op="vjepa2_encoder", impl=name, dtype=dtype, shape=shape, dist="normal", error=err,
                           tolerance=TOLERANCE[dtype], passed=err <= TOLERANCE[dtype], trials=1, reason=""))
        p = profile(fn, iters=iters)
        kernel[name] = p
        rows += [dict(base, impl=name, view="kernel_time", stat="mean", value=p.kernel_us, unit="us"),
                 dict(base, impl=name, view="launches", stat="mean", value=p.launches, unit="count")]
        parts = Counter()
        for k, us in p.kernel_us_by_name.items():
            parts[kind_of(k)] += us
        rows += [dict(base, impl=name, view="kernel_part", stat="mean", stage=k, value=us, unit="us")
                 for k, us in sorted(parts.items())]
        if name == "stock":
            stock_parts = dict(parts)
    sr = spans(cols, n=n_spans, rounds=3, warmup=3)
    for name in cols:
        per_round = sr.round_means(name)
        rows.append(dict(base, impl=name, view="event_span", stat="mean", value=sum(per_round) / 3, unit="us"))
        rows += [dict(base, impl=name, view="event_span", stat="mean", round=i + 1, value=v, unit="us")
                 for i, v in enumerate(per_round)]
    pred = amdahl(calls_made(stock, video), DTYPE[dtype], stock_parts, kernel["stock"].kernel_us, iters)
    rows.append(dict(base, impl="swapped", view="kernel_time", stat="predicted", value=pred["predicted_us"], unit="us"))
    rows.append(dict(base, impl="stock", view="kernel_part", stat="mean", stage="replaced_by_swap",
                     value=pred["replaced_us"], unit="us"))
    log("  kernel us: " + ", ".join(f"{k} {p.kernel_us:.0f}" for k, p in kernel.items())
        + f"; predicted swapped {pred['predicted_us']:.0f} (swap reaches {pred['share']:.0%} of stock)")
    return rows, checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage.ext.models.run", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the machine's data folder; rows go to <out>/models/")
    ap.add_argument("--frames", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPE))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--spans", type=int, default=30)
    ap.add_argument("--tiny", action="store_true", help="the small configuration (a smoke test)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("models: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32: the library's default on this road
    out = Path(a.out) / "models"
    e = env.environment(" ".join(sys.argv))
    data.ensure_same_machine(a.out, e)
    run = data.add_new_run(out, new_run_id, e)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    for frames in a.frames:
        for dtype in a.dtypes:
            rows, checks = measure_case(frames, dtype, vjepa2.TINY if a.tiny else vjepa2.VITL16, a.iters, a.spans, log)
            data.merge_csv(pd.DataFrame(rows).assign(run=run), out / "vjepa2.csv",
                           ["op", "impl", "dtype", "shape", "shape_set", "cache", "view", "round", "stat", "stage"])
            data.merge_csv(pd.DataFrame(checks).assign(run=run), out / "checks.csv", ["op", "impl", "dtype", "shape"])
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
