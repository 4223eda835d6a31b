"""The malformed variants of one argument that the fuzz test (``tests/test_fuzz.py``) draws from: a tensor's
dtype, rank, size, device, layout and values; an ``out=`` buffer's; a graph's indices. Each generator
returns (description, value) pairs; the value is what a careless caller might pass."""
from __future__ import annotations

import torch


def _other_device(device):
    return ["meta"] + (["cpu"] if device == "cuda" else [])


def tensor_mutations(t, rnd, device):
    """(description, replacement) for one tensor argument: wrong dtypes, ranks, sizes, strides,
    devices, or not a tensor. Some are legal (a strided view), and must then be answered right."""
    float_t = t.is_floating_point()
    out = [("float64", t.double()), ("float16", t.half()), ("int64", t.long()),
           ("int32" if float_t else "float32", t.int() if float_t else t.float()),
           ("bfloat16", t.bfloat16()),
           ("rank+1", t.unsqueeze(0)), ("not a tensor", t.tolist()), ("None", None)]
    if t.dim() >= 1:
        d = rnd.randrange(t.dim())
        out.append(("rank-1", t.reshape(-1) if t.dim() > 1 else t.sum()))
        out.append((f"size+1 dim {d}", torch.cat([t, t.narrow(d, 0, 1)], d) if t.shape[d] else t.new_zeros(
            t.shape[:d] + (1,) + t.shape[d + 1:])))
        if t.shape[d] > 1:
            out.append((f"size-1 dim {d}", t.narrow(d, 0, t.shape[d] - 1)))
        wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype, device=t.device)
        wide[..., ::2] = t
        out.append(("every other column of a wider tensor", wide[..., ::2]))
        if t.shape[-1]:
            out.append(("stride 0 (expanded)", t[..., :1].expand(t.shape)))
    if t.dim() >= 2:
        out.append(("column-major layout", t.transpose(-1, -2).contiguous().transpose(-1, -2)))
    for dev in _other_device(device):
        out.append((f"on {dev}", t.to(dev)))
    return out


def int_mutations(v, rnd, device):
    """(description, replacement) for a whole-number argument (a rotary embedding's grid side): out of
    range, of another type, or another legal value (which must then be answered right)."""
    return [("zero", 0), ("negative", -abs(v) - 1), ("a float", v + 0.5), ("a string", str(v)), ("None", None),
            ("a bool", True), ("a tensor", torch.tensor(v, device=device)), ("one more", v + 1)]


def out_mutations(ref_out, rnd, device):
    shape, dt = tuple(ref_out.shape), ref_out.dtype
    nan = float("nan")
    out = [("no out", None), ("exact out", torch.full(shape, nan, dtype=dt, device=device)),
           ("broadcast-shaped out", torch.full((2,) + shape, nan, dtype=dt, device=device)),
           ("float64 out", torch.full(shape, nan, dtype=torch.float64, device=device)),
           ("bfloat16 out" if dt != torch.bfloat16 else "float32 out",
            torch.full(shape, nan, dtype=torch.bfloat16 if dt != torch.bfloat16 else torch.float32, device=device)),
           ("out of one more row", torch.full((shape[0] + 1,) + shape[1:], nan, dtype=dt, device=device)),
           ("out as a list", ref_out.tolist())]
    if len(shape) >= 2:
        out.append(("column-major out", torch.full(shape[::-1], nan, dtype=dt, device=device).transpose(-1, -2)
                    if len(shape) == 2 else torch.full(shape, nan, dtype=dt, device=device).transpose(0, 1)))
    if shape and shape[-1]:
        out.append(("expanded out", torch.full(shape[-1:], nan, dtype=dt, device=device).expand(shape)))
    for dev in _other_device(device):
        out.append((f"out on {dev}", torch.full(shape, nan, dtype=dt, device=dev)))
    return out


def graph_mutations(g, rnd, device):
    """(description, thunk): CSRGraph.build called with a malformed graph, or a graph made invalid."""
    from kernels.neighbor_agg.graph import CSRGraph
    rp, col, w, n_src = g.rowptr.clone(), g.col.clone(), g.w.clone(), g.n_src
    cases = [("rowptr shifted by 1", lambda: CSRGraph.build(rp + 1, col, w, n_src)),
             ("rowptr int64", lambda: CSRGraph.build(rp.long(), col, w, n_src)),
             ("col int64", lambda: CSRGraph.build(rp, col.long(), w, n_src)),
             ("w float64", lambda: CSRGraph.build(rp, col, w.double(), n_src)),
             ("w one short", lambda: CSRGraph.build(rp, col, w[:-1] if len(w) else w.new_ones(1), n_src)),
             ("rowptr 2-d", lambda: CSRGraph.build(rp[None], col, w, n_src)),
             ("rowptr ends past E", lambda: CSRGraph.build(torch.cat([rp, rp[-1:] + 1]), col, w, n_src)),
             ("negative n_src", lambda: CSRGraph.build(rp, col, w, -1)),
             ("plain constructor", lambda: CSRGraph(rp, col, w))]
    for dev in _other_device(device):
        cases.append((f"col on {dev}", lambda dev=dev: CSRGraph.build(rp, col.to(dev), w, n_src)))
    if len(col):
        k = rnd.randrange(len(col))
        bad = col.clone()
        bad[k] = rnd.choice([n_src, n_src + 1000, -1])
        cases.append((f"col[{k}] = {int(bad[k])}", lambda: CSRGraph.build(rp, bad, w, n_src)))
        cases.append(("n_src below the largest column", lambda: CSRGraph.build(rp, col, w, int(col.max()))))
    if len(rp) > 2 and int(rp[-1]) > 0:
        i = rnd.randrange(1, len(rp) - 1)
        down = rp.clone()
        down[i] = int(rp[-1]) + 1 if rnd.random() < 0.5 else -1
        cases.append((f"rowptr[{i}] out of order", lambda: CSRGraph.build(down, col, w, n_src)))
    return cases
