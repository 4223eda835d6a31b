"""One development pass of the Rust column on a GPU machine (about three minutes): a smoke test,
the GPU tests, then the Rust kernels timed beside PyTorch (and Triton for neighbor_agg) at the
field and large shapes, and the rust_native binary. Writes logs and a CSV under OUTDIR; prints a
short table. Development numbers only: the book's data come from `mage measure`.

    python3 kernels/rust/devrun.py OUTDIR [--budget-s 185]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mage import ops, registry  # noqa: E402
from mage.check import rel_error  # noqa: E402
from mage.timing import graph_span, spans, summarize  # noqa: E402

T0 = time.time()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=185)
    ap.add_argument("--pytest-s", type=float, default=70)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "log.txt", "w")

    def log(*msg):
        line = f"[{time.time() - T0:6.1f}s] " + " ".join(str(m) for m in msg)
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    def left():
        return a.budget_s - (time.time() - T0)

    import kernels.rust as rust
    log("torch", torch.__version__, torch.cuda.get_device_name(0), "| rust:", rust.available() or "ok",
        "| ptx_py:", rust.py_available() or "ok")
    rows = []

    # 1. smoke: every kernel once at a small awkward shape, on both launch paths
    for impl in [i for i in registry.impls() if i.family == "rust"] + [rust.variant("matmul", 2),
                                                                        rust.variant("triangle", 1)]:
        spec = ops.OPS[impl.op]
        shape = spec.awkward[2]
        try:
            inputs = spec.inputs(shape, seed=1, device="cuda")
            args = impl.prepare(*inputs) if impl.prepare else inputs
            got = impl.fn(*args)
            torch.cuda.synchronize()
            err = rel_error(got, spec.reference(*inputs))
            log(f"smoke {impl.op:12s} {impl.name:12s} {ops.shape_key(shape):28s} rel err {err:.2e}",
                "OK" if err <= ops.TOLERANCE["fp32"] else "FAIL")
        except Exception as e:  # noqa: BLE001 - log and go on: one broken kernel must not hide the rest
            log(f"smoke {impl.op} {impl.name} RAISED {type(e).__name__}: {e}")

    # 2. the GPU tests
    t = time.time()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_rust.py",
                               "-p", "no:cacheprovider", "-rf"], capture_output=True, text=True,
                              timeout=a.pytest_s, cwd=Path(__file__).resolve().parents[2])
        (out / "pytest_gpu.log").write_text(done.stdout + done.stderr)
        tail = [ln for ln in done.stdout.splitlines() if ln.startswith(("FAILED", "ERROR")) or " passed" in ln
                or " failed" in ln]
        log(f"pytest -m gpu: exit {done.returncode} in {time.time() - t:.0f}s:", *tail[-12:])
        try:
            log("rust_ptx_py backend:", rust.py_backend(0))
        except Exception as e:  # noqa: BLE001
            log("rust_ptx_py backend failed:", type(e).__name__, e)
    except subprocess.TimeoutExpired as e:
        (out / "pytest_gpu.log").write_text((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                                            else (e.stdout or ""))
        log(f"pytest -m gpu: timed out after {a.pytest_s}s")

    # 3. timing: large shapes first (the targets), then field shapes
    from mage.ceilings import copy_gbps, matmul_tflops
    from mage.profile import profile
    copy, _ = copy_gbps(1.0)
    fp32, _ = matmul_tflops("fp32", 8192)
    log(f"ceilings: copy {copy:.0f} GB/s, cuBLAS fp32 {fp32:.1f} TFLOP/s")
    rows.append(dict(op="ceiling", impl="copy_gbps", shape="", shape_set="", view="ceiling", stat="value", value=copy))
    rows.append(dict(op="ceiling", impl="fp32_tflops", shape="", shape_set="", view="ceiling", stat="value", value=fp32))

    extra = {"matmul": ["rust_scalar", "v2"], "triangle": ["v1"], "neighbor_agg": ["triton"]}
    cases = [(op, s, ss) for ss in ("large", "field") for op in ops.OPS for s in ops.OPS[op].shapes[ss]]
    for op, shape, ss in cases:
        if left() < 25:
            log(f"skip {op} {ops.shape_key(shape)} ({ss}): out of time")
            continue
        spec = ops.OPS[op]
        key = ops.shape_key(shape)
        try:
            inputs = spec.inputs(shape, seed=7, device="cuda")
            ref = spec.reference(*inputs)
        except Exception as e:  # noqa: BLE001
            log(f"{op} {key}: inputs failed: {e}")
            continue
        flops, nbytes = spec.cost(shape)
        floor = max(flops / (fp32 * 1e12), nbytes / (copy * 1e9)) * 1e6
        impls = [registry.get(op, "pytorch"), registry.get(op, "rust"), registry.get(op, "rust_ptx_py")]
        for name in extra.get(op, []):
            if name.startswith("v"):
                impls.append(rust.variant(op, int(name[1:])))
            else:
                try:
                    impls.append(registry.get(op, name))
                except Exception as e:  # noqa: BLE001
                    log(f"{op}: no {name}: {e}")
        for impl in impls:
            if left() < 15:
                break
            why = impl.runs_on("cuda")
            if why:
                log(f"{op} {key} {impl.name}: not run ({why})")
                continue
            try:
                args = impl.prepare(*inputs) if impl.prepare else inputs
                fn = lambda: impl.fn(*args)  # noqa: E731
                got = fn()
                torch.cuda.synchronize()
                err = rel_error(got, ref)
                one = spans({"x": fn}, n=3, rounds=1, warmup=1).samples["x"][0][-1]
                n = int(max(15, min(300, 0.3e6 / max(one, 1.0))))
                sp = spans({"x": fn}, n=n, rounds=3, warmup=3)
                whole = summarize([x for r in sp.samples["x"] for x in r])
                g = kern = float("nan")
                try:
                    if one < 5000:
                        g = graph_span([fn], replays=10, repeat=5)
                except Exception as e:  # noqa: BLE001 - a call that cannot be captured still has spans
                    log(f"{op} {key} {impl.name}: graph capture failed: {type(e).__name__}: {e}")
                try:
                    if ss == "large" or impl.name == "rust":
                        p = profile(fn, iters=5 if one > 2000 else 20, warmup=2)
                        kern = p.kernel_us
                        rows.append(dict(op=op, impl=impl.name, shape=key, shape_set=ss, view="launches",
                                         stat="mean", value=p.launches))
                except Exception as e:  # noqa: BLE001
                    log(f"{op} {key} {impl.name}: profile failed: {type(e).__name__}: {e}")
                for view, stat, v in (("event_span", "median", whole["median"]), ("event_span", "min", whole["min"]),
                                      ("graph_span", "median", g), ("kernel_time", "mean", kern),
                                      ("check", "rel_error", err)):
                    rows.append(dict(op=op, impl=impl.name, shape=key, shape_set=ss, view=view, stat=stat, value=v))
                log(f"{op:12s} {key:34s} {impl.name:12s} err {err:.1e} kernel {kern:9.2f} graph {g:9.2f} "
                    f"span med {whole['median']:9.2f} (n={n}) floor {floor:8.2f} us")
            except Exception as e:  # noqa: BLE001
                log(f"{op} {key} {impl.name} RAISED {type(e).__name__}: {e}")
                (out / "tracebacks.txt").open("a").write(traceback.format_exc() + "\n")
        # the binary with no Python: same PTX, own inputs, same span protocol
        for scalar in ([False, True] if op == "matmul" and ss == "field" else [False]):
            if left() < 10:
                break
            try:
                df = rust.native_spans(op, shape, ss, scalar=scalar, spans=300 if ss == "field" else 60, timeout=60)
                df.to_csv(out / f"native_{op}_{ss}_{len(rows)}.csv", index=False)
                top = df[(df["round"] == 0) & (df["stat"].isin(["median", "mean"]))]
                vals = {f"{r.view}:{r.stat}": r.value for r in top.itertuples()}
                log(f"{op:12s} {key:34s} {df['impl'].iloc[0]:12s} native span med {vals.get('event_span:median', 0):9.2f} "
                    f"graph {vals.get('graph_span:mean', float('nan')):9.2f} us")
                for r in top.itertuples():
                    rows.append(dict(op=op, impl=r.impl, shape=key, shape_set=ss, view=r.view, stat=r.stat, value=r.value))
            except Exception as e:  # noqa: BLE001
                log(f"{op} {key} rust_native RAISED {type(e).__name__}: {e}")
        del inputs, ref
        torch.cuda.empty_cache()

    import pandas as pd
    df = pd.DataFrame(rows)
    df.to_csv(out / "rust_dev.csv", index=False)
    table = df[df["view"].isin(["kernel_time", "graph_span", "event_span", "launches"]) &
               df["stat"].isin(["mean", "median"])]
    piv = table.pivot_table(index=["op", "shape", "impl"], columns="view", values="value", aggfunc="first")
    print(piv.round(2).to_string())
    log(f"done in {time.time() - T0:.0f}s")


if __name__ == "__main__":
    main()
