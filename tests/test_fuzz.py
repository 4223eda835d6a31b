"""Bad input, at random, through the public entry points: ``mage.run``, the registered operators
(torch.ops.mage.*) and ``CSRGraph.build``. Every call must either raise MageInputError naming the
operation and one of its arguments, or return the float64 reference's answer. Nothing else: no other
exception, no crash, no wrong answer. (One exception to the exception type: a non-tensor passed to a
registered operator is refused by PyTorch's dispatcher, which checks the schema before our code runs;
its error names the operator and the argument.)

The calls run in a child process (this file run as a script), which names each case before making it:
a segfault fails the test with the case that caused it. Seeded. On the CPU it covers what runs there
(PyTorch eager; Triton under TRITON_INTERPRET=1); ``pytest -m gpu tests/test_fuzz.py`` runs every
implementation on a CUDA GPU. Both print the counts (calls, refused, answered) per implementation
(shown with ``-rP`` or ``-s``).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tests.support.mutations import graph_mutations, int_mutations, out_mutations, tensor_mutations

CALLS = 200  # malformed calls per implementation through mage.run (more through its operator): the full tier
QUICK_CALLS = 10  # the fast tier's fixed budget: every implementation and entry point, a twentieth of the calls
ROOT = Path(__file__).resolve().parent.parent


# ---- the child process ---------------------------------------------------------------------------
def _expect(op, fn, ref_fn, allowed):
    """Call fn; return ('refused'|'answered', problem or None)."""
    from mage.errors import MageInputError
    try:
        got = fn()
    except MageInputError as e:
        if e.op != op or e.arg not in allowed:
            return "refused", f"error names ({e.op!r}, {e.arg!r}), not {op!r} and one of {sorted(allowed)}: {e}"
        return "refused", None
    except RuntimeError as e:
        # A registered operator's schema is checked by PyTorch's dispatcher before any of our code
        # runs: a non-tensor argument is refused there, naming the operator and the argument.
        if f"mage::triton_{op}() Expected a value of type" in str(e) and "for argument '" in str(e):
            return "refused", None
        return "other", f"{type(e).__name__}: {str(e)[:300]}"
    except Exception as e:  # noqa: BLE001 - any other error is the finding
        return "other", f"{type(e).__name__}: {str(e)[:300]}"
    try:
        return "answered", ref_fn(got)
    except Exception as e:  # noqa: BLE001 - an answer the reference cannot even be compared with
        return "answered", f"answer not comparable: {type(e).__name__}: {str(e)[:200]}"


# The one legal mutation that changes the problem, not only its layout: an expanded tensor repeats one
# column. For a block's weight in bf16 that makes the problem ill-conditioned (equal columns leave a
# LayerNorm dividing by a tiny spread), and bf16 misses the reference there in any layout, eager as often.
DEGENERATE = "stride 0 (expanded)"


def _contiguous(args):
    return tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)


def _tolerance(spec, dtype, inputs) -> float:
    """The column's tolerance, or bf16's where the call's inputs are stored in bf16: a column follows its
    inputs' storage as PyTorch does (an operation whose only floating input is bf16, neighbour
    aggregation's features, passes validation whole, and an FP32 column then answers in bf16)."""
    low = any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in inputs)
    return spec.tol("bf16" if low else dtype)


def _compare(spec, dtype, inputs, out, again=None):
    """A checker of one call's result against the float64 reference. ``again``: for an expanded bf16
    input, the same call on contiguous copies of the same values. Such a result that misses the reference
    passes only if the contiguous call misses it too (the values are ill-conditioned, not misread) and
    the two agree within the tolerance (the stride-0 layout was read right)."""
    def check(got):
        bad = _against_reference(got)
        if bad is None or again is None or not bad.startswith("relative error"):
            return bad  # a wrong shape, a lost out= buffer or non-finite values fail in any layout
        same = again()
        if _against_reference(same, own=False) is None:
            return bad  # contiguous copies of the same values meet the reference: the layout was misread
        g, c = got.detach().cpu().double(), same.detach().cpu().double()
        diff = float((g - c).norm() / c.norm()) if float(c.norm()) > 0 else float((g - c).norm())
        tol = _tolerance(spec, dtype, inputs())
        return None if diff < tol else f"{bad}; {diff:.2e} from the same call on contiguous copies"

    def _against_reference(got, own=True):
        if own and out is not None and isinstance(out, torch.Tensor) and got is not out:
            return "returned a new tensor, not the out= buffer it accepted"
        if not isinstance(got, torch.Tensor):
            return f"returned {type(got).__name__}"
        args = inputs()
        ref = spec.reference(*args).cpu()  # on the inputs' device (a graph cannot move)
        if tuple(got.shape) != tuple(ref.shape):
            return f"returned shape {tuple(got.shape)}, reference {tuple(ref.shape)}"
        g = got.detach().cpu().double()
        if not torch.isfinite(g).all() and torch.isfinite(ref).all():
            return "returned non-finite values"
        err = float((g - ref).norm() / ref.norm()) if float(ref.norm()) > 0 else float((g - ref).norm())
        tol = _tolerance(spec, dtype, args)
        return None if err < tol else f"relative error {err:.2e} > {tol:.0e}"
    return check


def _base_shapes(spec, device):
    # the op's small awkward shapes (cheap under the interpreter), empty ones included
    limit = 7e4 if device == "cpu" else 4e6
    return [s for s in spec.awkward if spec.cost(s)[1] < limit]


def _cases(impl, device, rnd, calls):
    """Yield (entry point, description, thunk, checker) for one implementation."""
    from mage import ops, run
    spec = ops.OPS[impl.op]
    allowed = set(spec.args) | {"out", "rowptr", "col", "w", "n_src", "graph"}
    shapes = _base_shapes(spec, device)
    # the operator entry: an op's own 'mage::triton_<op>' (a model's part has the model's operator instead,
    # with arguments of its own: its folder tests it)
    operator = impl.family == "triton" and hasattr(torch.ops.mage, f"triton_{impl.op}")
    entry_points = ["run"] + (["operator"] if operator else []) + \
        (["build"] if impl.op == "neighbor_agg" else [])
    for n in range(calls * len(entry_points)):
        entry = entry_points[n % len(entry_points)]
        inputs = spec.inputs(rnd.choice(shapes), seed=rnd.randrange(1 << 30), device=device, dtype=impl.dtype)
        if entry == "build":
            desc, thunk = rnd.choice(graph_mutations(inputs[0], rnd, device))
            yield entry, desc, thunk, None, allowed
            continue
        args = list(_raw(impl.op, inputs) if entry == "operator" else inputs)
        names = list(_raw_names(impl.op) if entry == "operator" else spec.args)
        out = None
        which = rnd.randrange(len(args) + (1 if entry == "run" else 0))
        if which == len(args):
            desc, out = rnd.choice(out_mutations(spec.empty_out(*inputs), rnd, device))
        elif isinstance(args[which], torch.Tensor):
            desc, args[which] = rnd.choice(tensor_mutations(args[which], rnd, device))
            desc = f"{names[which]}: {desc}"
        elif isinstance(args[which], int):  # a whole number (a grid side)
            desc, args[which] = rnd.choice(int_mutations(args[which], rnd, device))
            desc = f"{names[which]}: {desc}"
        else:  # the graph: invalidated after build, or not a graph at all
            g = args[which]
            choice = rnd.randrange(3)
            if choice == 0 and g.nnz:
                g.col[0] = 0  # written through PyTorch: the graph is no longer intact
                desc = "graph modified in place after build"
            else:
                args[which] = (g.rowptr, g.col, g.w) if choice == 1 else None
                desc = "graph: a tuple of tensors" if choice == 1 else "graph: None"
        degenerate = desc.split(": ", 1)[-1] == DEGENERATE and impl.dtype == "bf16"
        if entry == "run":
            call = (lambda a=tuple(args), o=out: run(impl.op, impl.name, *a, dtype=impl.dtype, out=o))
            again = (lambda a=tuple(args): run(impl.op, impl.name, *_contiguous(a), dtype=impl.dtype)) if degenerate else None
            check = _compare(spec, impl.dtype, lambda a=tuple(args): a, out, again)
        else:
            call = (lambda a=tuple(args): _operator(impl)(*a))
            again = (lambda a=tuple(args): _operator(impl)(*_contiguous(a))) if degenerate else None
            check = _compare(spec, impl.dtype, lambda a=tuple(args): _unraw(impl.op, a), None, again)
        yield entry, desc, call, check, allowed


def _graph_at(op):
    """Where the op takes a graph (None if it takes none): its operator takes the raw CSR tensors there."""
    from mage import ops
    args = ops.OPS[op].args
    return args.index("graph") if "graph" in args else None


def _raw(op, inputs):
    i = _graph_at(op)
    if i is None:
        return inputs
    g = inputs[i]
    return (*inputs[:i], g.rowptr, g.col, g.w, *inputs[i + 1:])


def _raw_names(op):
    from mage import ops
    args, i = ops.OPS[op].args, _graph_at(op)
    return args if i is None else (*args[:i], "rowptr", "col", "w", *args[i + 1:])


def _unraw(op, args):
    """The reference's inputs for an operator call that was answered (so its raw tensors were valid):
    the tensor after the graph's holds the rows of its source nodes."""
    i = _graph_at(op)
    if i is None:
        return tuple(args)
    from kernels.neighbor_agg.graph import CSRGraph
    rowptr, col, w, x = args[i:i + 4]
    return (*args[:i], CSRGraph.build(rowptr, col, w, x.shape[0]), *args[i + 3:])


def _operator(impl):
    fn = getattr(torch.ops.mage, f"triton_{impl.op}")
    if impl.op == "matmul":
        return lambda A, B: fn(A, B, impl.dtype)
    return fn


def worker(device: str, seed: int, calls: int, only: list[str] | None = None) -> dict:
    from mage.registry import impls
    counts, problems = {}, []
    for impl in impls():
        if only and impl.op not in only:
            continue
        if not impl.callable or impl.runs_on(device) is not None:
            continue
        if device == "cpu" and impl.family == "pytorch" and impl.name != "pytorch":
            continue  # torch.compile on the CPU: minutes of compilation for no kernel CI ships
        key = f"{impl.op}/{impl.name}/{impl.dtype}"
        c = counts.setdefault(key, {"calls": 0, "refused": 0, "answered": 0})
        rnd = random.Random(f"{seed}-{key}")
        t0 = time.perf_counter()
        for entry, desc, call, check, allowed in _cases(impl, device, rnd, calls):
            print(f"CASE {key} {entry}: {desc}", file=sys.stderr, flush=True)
            outcome, problem = _expect(impl.op, call, check or (lambda got: "build accepted a malformed graph"),
                                       allowed)
            if device == "cuda":
                torch.cuda.synchronize()  # an illegal address surfaces here, at its case
            c["calls"] += 1
            c[outcome] = c.get(outcome, 0) + 1
            if problem:
                problems.append(f"{key} {entry}: {desc}: {problem}")
        c["seconds"] = round(time.perf_counter() - t0, 1)
    return {"counts": counts, "problems": problems}


# ---- the tests -----------------------------------------------------------------------------------
# A guard against a hung child, not a speed target: every registered column takes its CALLS, and on the
# CPU (two cores, the interpreter) the run took about nine minutes once the operations had bf16 columns.
def _run_child(device, seed=0, calls=CALLS, only=(), timeout=1200):
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    p = subprocess.run([sys.executable, "-m", "tests.test_fuzz", device, str(seed), str(calls), *only], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    last = [ln for ln in p.stderr.splitlines() if ln.startswith("CASE ")][-1:]
    assert p.returncode == 0, f"the fuzz child died (exit {p.returncode}) at {last}:\n{p.stderr[-3000:]}"
    result = json.loads(p.stdout.strip().splitlines()[-1])
    counts = result["counts"]
    total = {k: sum(c[k] for c in counts.values()) for k in ("calls", "refused", "answered")}
    print(f"\nfuzz on {device}, seed {seed}, {' '.join(only) or 'every operation'}: {total['calls']} calls, "
          f"{total['refused']} refused, {total['answered']} answered")
    for key, c in counts.items():
        print(f"  {key:32s} {c['calls']:5d} calls {c['refused']:5d} refused {c['answered']:5d} answered "
              f"({c['seconds']} s)")
    return counts, result["problems"]


def _assert_clean(counts, problems, calls=CALLS):
    assert not problems, f"{len(problems)} bad outcomes, first ones:\n" + "\n".join(problems[:15])
    for key, c in counts.items():
        assert c["calls"] >= calls, (key, c)
        assert c["refused"] + c["answered"] == c["calls"], (key, c)


def test_fuzz_cpu_quick():
    """The fast tier: every implementation that runs here, through every entry point, QUICK_CALLS each,
    on a seed of its own (so the full tier's calls are not repeated)."""
    counts, problems = _run_child("cpu", seed=1, calls=QUICK_CALLS)
    assert {k.split("/")[1] for k in counts} >= {"pytorch", "triton"}
    assert len({k.split("/")[0] for k in counts}) >= 5, counts.keys()
    _assert_clean(counts, problems, QUICK_CALLS)


def _op_names():
    from mage import ops
    return list(ops.OPS)


@pytest.mark.slow
@pytest.mark.parametrize("op", _op_names())
def test_fuzz_cpu(op):
    """The full count, one child per operation (so the workers share the run)."""
    counts, problems = _run_child("cpu", only=[op])
    assert {k.split("/")[0] for k in counts} == {op}, counts.keys()
    _assert_clean(counts, problems)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fuzz_gpu():
    counts, problems = _run_child("cuda")
    _assert_clean(counts, problems)


if __name__ == "__main__":  # the child: ``python -m tests.test_fuzz`` from the root, so ``tests.support`` imports
    dev, seed_arg, calls_arg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(worker(dev, seed_arg, calls_arg, sys.argv[4:])))
