"""The five operations, each defined once: inputs, seeded factory, float64 reference, cost model, shapes.

Every implementation of an operation takes the same positional inputs plus ``out=None`` and returns the
output tensor. The float64 reference here is the single definition of "correct" for all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from .errors import MageInputError

# Relative error ||out - ref|| / ||ref|| allowed per precision. FP32 must catch a TF32 or FP16 slip
# (about 3e-4 and 5e-4), TF32 must catch bf16 (about 4e-3).
TOLERANCE = {"fp32": 5e-5, "tf32": 2e-3, "bf16": 2e-2}
EPS_LAYERNORM = 1e-5


def shape_key(shape: dict) -> str:
    """'M=1024,K=1024,N=1024': the shape as one readable, sortable string for tidy data."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def parse_shape(key: str) -> dict:
    out = {}
    for part in key.split(","):
        k, v = part.split("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


# --------------------------------------------------------------------------------------- validation
def _tensor(op, name, t, dtypes, rank=None):
    if not isinstance(t, torch.Tensor):
        raise MageInputError(op, name, f"must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        want = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise MageInputError(op, name, f"must have dtype {want}, got {str(t.dtype).replace('torch.', '')}")
    if rank is not None and t.dim() != rank:
        raise MageInputError(op, name, f"must have {rank} dimensions, got shape {tuple(t.shape)}")


def _same_device(op, named):
    devices = {name: t.device for name, t in named.items()}
    first = next(iter(devices.values()))
    for name, dev in devices.items():
        if dev != first:
            raise MageInputError(op, name, f"is on {dev} but the other inputs are on {first}")


def _contiguous(op, named):
    for name, t in named.items():
        if not t.is_contiguous():
            raise MageInputError(op, name, "must be contiguous (call .contiguous() first)")


def _dim(op, name, t, axis, expected, what):
    if t.shape[axis] != expected:
        raise MageInputError(op, name, f"has size {t.shape[axis]} in dim {axis}, expected {expected} ({what})")


def check_out(op: str, out, shape, dtype, device):
    """Validate a caller-supplied output buffer (the checks pass one poisoned with NaN)."""
    if out is None:
        return
    _tensor(op, "out", out, (dtype,))
    if tuple(out.shape) != tuple(shape):
        raise MageInputError(op, "out", f"must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.device != device:
        raise MageInputError(op, "out", f"is on {out.device}, expected {device}")
    if not out.is_contiguous():
        raise MageInputError(op, "out", "must be contiguous")


FLOAT = (torch.float32, torch.bfloat16)


# ------------------------------------------------------------------------------------------ graphs
@dataclass(frozen=True)
class CSRGraph:
    """A weighted graph in CSR form whose structure has been validated once, at construction.

    Validation reads device memory (a synchronisation), so it happens here and not in every launch:
    holding a CSRGraph is the proof that ``rowptr`` is monotone from 0 to E and every column is in range.
    ``row`` (the COO row of each edge) is derived once because the eager PyTorch expression needs it.
    """

    rowptr: torch.Tensor  # [n + 1] int32, monotone, rowptr[0] = 0, rowptr[n] = E
    col: torch.Tensor  # [E] int32, sorted within each row, in [0, n_src)
    w: torch.Tensor  # [E] float32 edge weights
    n_src: int  # number of source nodes (rows of x)
    row: torch.Tensor = field(repr=False)  # [E] int32, derived
    max_degree: int = 0

    @property
    def n(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def nnz(self) -> int:
        return self.col.numel()

    @staticmethod
    def build(rowptr, col, w, n_src=None, op="neighbor_agg") -> "CSRGraph":
        _tensor(op, "rowptr", rowptr, (torch.int32,), 1)
        _tensor(op, "col", col, (torch.int32,), 1)
        _tensor(op, "w", w, (torch.float32,), 1)
        _same_device(op, {"rowptr": rowptr, "col": col, "w": w})
        _contiguous(op, {"rowptr": rowptr, "col": col, "w": w})
        if rowptr.numel() < 1:
            raise MageInputError(op, "rowptr", "must have n + 1 >= 1 entries")
        E = col.numel()
        if w.numel() != E:
            raise MageInputError(op, "w", f"has {w.numel()} entries but col has {E}")
        rp = rowptr.to("cpu", torch.int64)
        if rp[0].item() != 0:
            raise MageInputError(op, "rowptr", f"must start at 0, starts at {rp[0].item()}")
        if rp[-1].item() != E:
            raise MageInputError(op, "rowptr", f"must end at E = {E} (len(col)), ends at {rp[-1].item()}")
        deg = rp[1:] - rp[:-1]
        if (deg < 0).any():
            bad = int(torch.nonzero(deg < 0)[0])
            raise MageInputError(op, "rowptr", f"must be non-decreasing; rowptr[{bad + 1}] < rowptr[{bad}]")
        n = rowptr.numel() - 1
        n_src = n if n_src is None else int(n_src)
        if E:
            lo, hi = int(col.min()), int(col.max())
            if lo < 0 or hi >= n_src:
                raise MageInputError(op, "col", f"holds indices in [{lo}, {hi}], outside [0, {n_src})")
        row = torch.repeat_interleave(torch.arange(n, dtype=torch.int32, device=col.device),
                                      deg.to(col.device), output_size=E)
        return CSRGraph(rowptr, col, w, n_src, row, int(deg.max()) if n else 0)


def random_graph(n: int, deg: int, dist: str, gen: torch.Generator, device) -> CSRGraph:
    """A directed graph with mean degree ``deg``: 'uniform' (every row deg edges) or 'skewed' (Pareto
    tail: a few hubs hold many edges, most rows few or none, the case that breaks one-thread-per-row)."""
    if dist == "uniform":
        degrees = torch.full((n,), deg, dtype=torch.int64)
    elif dist == "skewed":
        u = torch.rand(n, generator=gen, device=gen.device).cpu().double().clamp_min(1e-12)
        raw = u.pow(-1.0 / 1.2) - 1.0  # Pareto with shape 1.2: heavy tail, finite mean
        degrees = torch.floor(raw * (deg / raw.mean().clamp_min(1e-12))).to(torch.int64)
    else:
        raise MageInputError("neighbor_agg", "dist", f"must be 'uniform' or 'skewed', got {dist!r}")
    degrees = degrees.clamp(0, max(n, 1)) if n else degrees
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(degrees, 0)
    E = int(rowptr[-1])
    col = torch.randint(0, max(n, 1), (E,), generator=gen, device=gen.device).cpu()
    if E:
        # sort columns within each row: a stable sort by (row, col)
        row = torch.repeat_interleave(torch.arange(n), degrees)
        col = col[torch.argsort(row * max(n, 1) + col)]
    w = torch.rand(E, generator=gen, device=gen.device).cpu().float() * 2 - 1
    return CSRGraph.build(rowptr.to(torch.int32).to(device), col.to(torch.int32).to(device),
                          w.to(device), n)


def regraph(g: CSRGraph, gen: torch.Generator) -> CSRGraph:
    """Same degrees as ``g``, fresh random (sorted) columns and weights."""
    E = g.nnz
    col = torch.randint(0, max(g.n_src, 1), (E,), generator=gen, device=gen.device)
    if E:
        col = col[torch.argsort(g.row.long() * max(g.n_src, 1) + col)]
    w = torch.rand(E, generator=gen, device=gen.device) * 2 - 1
    dev = g.col.device
    return CSRGraph.build(g.rowptr, col.to(torch.int32).to(dev), w.float().to(dev), g.n_src)


# ---------------------------------------------------------------------------------------- the ops
@dataclass(frozen=True)
class Op:
    """One operation: everything an implementation, a test, the harness or a page needs to know."""

    name: str
    args: tuple[str, ...]
    equation: str  # LaTeX, shown by the book
    make_inputs: Callable  # (shape, gen, device, dtype, dist) -> tuple of inputs
    reference: Callable  # (*inputs) -> float64 tensor
    out_spec: Callable  # (*inputs) -> (shape, dtype)
    validate: Callable  # (*inputs) -> None, raises MageInputError
    flops: Callable  # shape dict -> int
    bytes: Callable  # (shape dict, itemsize) -> int: compulsory, each input read once, each output written once
    shapes: dict  # 'field' | 'large' | 'sweep' -> list of shape dicts
    awkward: list  # small shapes that are not multiples of any tile, one row, empty
    dtypes: tuple = ("fp32",)

    def inputs(self, shape: dict, seed: int = 0, device="cpu", dtype="fp32", dist="normal"):
        """Fresh inputs from a seeded generator on ``device``; 'heavy' draws heavy-tailed values."""
        gen = torch.Generator(device=device).manual_seed(seed)
        return self.make_inputs(shape, gen, device, dtype, dist)

    def cost(self, shape: dict, dtype: str = "fp32") -> tuple[int, int]:
        """(FLOPs, compulsory bytes) of one call at ``shape``."""
        return self.flops(shape), self.bytes(shape, 2 if dtype == "bf16" else 4)

    def empty_out(self, *inputs):
        shape, dtype = self.out_spec(*inputs)
        return torch.empty(shape, dtype=dtype, device=_device_of(inputs))


def _device_of(inputs):
    for t in inputs:
        if isinstance(t, torch.Tensor):
            return t.device
        if isinstance(t, CSRGraph):
            return t.col.device
    raise ValueError("no tensor among inputs")


def _randn(shape, gen, device, dist, scale=1.0):
    x = torch.randn(shape, generator=gen, device=device)
    if dist == "heavy":  # log-normal scale: occasional values far from the bulk
        x = x * torch.exp(1.5 * torch.randn(shape, generator=gen, device=device))
    elif dist != "normal":
        raise MageInputError("inputs", "dist", f"must be 'normal' or 'heavy', got {dist!r}")
    return x * scale


_TORCH_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}


def _torch_dtype(op, dtype):
    if dtype not in _TORCH_DTYPE:
        raise MageInputError(op, "dtype", f"must be one of {sorted(_TORCH_DTYPE)}, got {dtype!r}")
    return _TORCH_DTYPE[dtype]


# matmul ---------------------------------------------------------------------------------------------
def _matmul_inputs(s, gen, device, dtype, dist):
    dt = _torch_dtype("matmul", dtype)
    A = _randn((s["M"], s["K"]), gen, device, dist).to(dt)
    B = _randn((s["K"], s["N"]), gen, device, dist).to(dt)
    return A, B


def matmul_reference(A, B):
    """C_ij = sum_k A_ik B_kj, in float64."""
    return A.double() @ B.double()


def _matmul_validate(A, B):
    _tensor("matmul", "A", A, FLOAT, 2)
    _tensor("matmul", "B", B, FLOAT, 2)
    _same_device("matmul", {"A": A, "B": B})
    if B.dtype != A.dtype:
        raise MageInputError("matmul", "B", f"has dtype {B.dtype}, but A has {A.dtype}")
    _dim("matmul", "B", B, 0, A.shape[1], "K, the columns of A")


# bias_gelu ------------------------------------------------------------------------------------------
def _bias_gelu_inputs(s, gen, device, dtype, dist):
    x = _randn((s["R"], s["C"]), gen, device, dist)
    b = _randn((s["C"],), gen, device, dist, scale=0.5)
    return x, b


def bias_gelu_reference(x, b):
    """y = gelu(x + b) with the exact GELU: z * (1 + erf(z / sqrt 2)) / 2."""
    z = x.double() + b.double()
    return 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))


def _bias_gelu_validate(x, b):
    _tensor("bias_gelu", "x", x, (torch.float32,), 2)
    _tensor("bias_gelu", "b", b, (torch.float32,), 1)
    _same_device("bias_gelu", {"x": x, "b": b})
    _dim("bias_gelu", "b", b, 0, x.shape[1], "C, the columns of x")


# layernorm ------------------------------------------------------------------------------------------
def _layernorm_inputs(s, gen, device, dtype, dist):
    x = _randn((s["R"], s["C"]), gen, device, dist) + 0.5  # an offset the mean must remove
    gamma = 1.0 + 0.1 * _randn((s["C"],), gen, device, "normal")
    beta = 0.1 * _randn((s["C"],), gen, device, "normal")
    return x, gamma, beta


def layernorm_reference(x, gamma, beta):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dimension (biased variance)."""
    x = x.double()
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS_LAYERNORM) * gamma.double() + beta.double()


def _layernorm_validate(x, gamma, beta):
    _tensor("layernorm", "x", x, (torch.float32,), 2)
    _tensor("layernorm", "gamma", gamma, (torch.float32,), 1)
    _tensor("layernorm", "beta", beta, (torch.float32,), 1)
    _same_device("layernorm", {"x": x, "gamma": gamma, "beta": beta})
    _dim("layernorm", "gamma", gamma, 0, x.shape[1], "C, the columns of x")
    _dim("layernorm", "beta", beta, 0, x.shape[1], "C, the columns of x")
    if x.shape[1] == 0:
        raise MageInputError("layernorm", "x", "must have at least one column to normalise over")


# triangle ------------------------------------------------------------------------------------------
def _triangle_inputs(s, gen, device, dtype, dist):
    A = _randn((s["N"], s["N"], s["C"]), gen, device, dist)
    B = _randn((s["N"], s["N"], s["C"]), gen, device, dist)
    return A, B


def triangle_reference(A, B):
    """O_ijc = sum_k A_ikc B_jkc: edges (i, k) and (j, k) meet at k (outgoing triangle update)."""
    return torch.einsum("ikc,jkc->ijc", A.double(), B.double())


def _triangle_validate(A, B):
    _tensor("triangle", "A", A, (torch.float32,), 3)
    _tensor("triangle", "B", B, (torch.float32,), 3)
    _same_device("triangle", {"A": A, "B": B})
    _dim("triangle", "A", A, 1, A.shape[0], "A must be [N, N, C]")
    if tuple(B.shape) != tuple(A.shape):
        raise MageInputError("triangle", "B", f"must have A's shape {tuple(A.shape)}, got {tuple(B.shape)}")


# neighbor_agg ---------------------------------------------------------------------------------------
def _neighbor_agg_inputs(s, gen, device, dtype, dist):
    graph = random_graph(s["n"], s["deg"], s.get("dist", "uniform"), gen, device)
    x = _randn((s["n"], s["F"]), gen, device, dist)
    return graph, x


def neighbor_agg_reference(graph, x):
    """y_i = sum over j in N(i) of w_ij x_j, in float64."""
    y = torch.zeros((graph.n, x.shape[1]), dtype=torch.float64, device=x.device)
    msg = x.double()[graph.col.long()] * graph.w.double()[:, None]
    return y.index_add_(0, graph.row.long(), msg)


def _neighbor_agg_validate(graph, x):
    if not isinstance(graph, CSRGraph):
        raise MageInputError("neighbor_agg", "graph", "must be a mage.ops.CSRGraph (build it with "
                             "CSRGraph.build(rowptr, col, w), which validates the structure once)")
    _tensor("neighbor_agg", "x", x, (torch.float32,), 2)
    _same_device("neighbor_agg", {"col": graph.col, "x": x})
    _dim("neighbor_agg", "x", x, 0, graph.n_src, "the graph's source nodes")


OPS: dict[str, Op] = {}


def _add(op: Op):
    OPS[op.name] = op
    return op


_add(Op(
    name="matmul", args=("A", "B"), equation=r"C_{ij} = \sum_k A_{ik} B_{kj}",
    make_inputs=_matmul_inputs, reference=matmul_reference,
    out_spec=lambda A, B: ((A.shape[0], B.shape[1]), A.dtype), validate=_matmul_validate,
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    bytes=lambda s, isz=4: isz * (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]),  # bf16 in, bf16 out
    shapes={"field": [dict(M=1024, K=1024, N=1024)], "large": [dict(M=4096, K=4096, N=4096)],
            "sweep": [dict(M=n, K=n, N=n) for n in (64, 128, 256, 512, 1024, 2048, 3072, 4096)]},
    awkward=[dict(M=1, K=1, N=1), dict(M=1, K=37, N=5), dict(M=17, K=33, N=129),
             dict(M=130, K=7, N=65), dict(M=0, K=8, N=8), dict(M=67, K=200, N=3)],
    dtypes=("fp32", "tf32", "bf16"),
))
_add(Op(
    name="bias_gelu", args=("x", "b"), equation=r"y_{rc} = \mathrm{gelu}(x_{rc} + b_c)",
    make_inputs=_bias_gelu_inputs, reference=bias_gelu_reference,
    out_spec=lambda x, b: (tuple(x.shape), x.dtype), validate=_bias_gelu_validate,
    # nominal: add, scale, erf, add, two multiplies; erf counted as one operation
    flops=lambda s: 6 * s["R"] * s["C"],
    bytes=lambda s, isz=4: 4 * (2 * s["R"] * s["C"] + s["C"]),
    shapes={"field": [dict(R=2048, C=512)], "large": [dict(R=16384, C=8192)],
            "sweep": [dict(R=r, C=1024) for r in (16, 64, 256, 1024, 4096, 16384, 65536, 131072)]},
    awkward=[dict(R=1, C=1), dict(R=1, C=1000), dict(R=3, C=4097), dict(R=37, C=129), dict(R=0, C=16)],
))
_add(Op(
    name="layernorm", args=("x", "gamma", "beta"),
    equation=r"y_{rc} = \frac{x_{rc} - \mu_r}{\sqrt{\sigma_r^2 + \epsilon}}\,\gamma_c + \beta_c",
    make_inputs=_layernorm_inputs, reference=layernorm_reference,
    out_spec=lambda x, g, b: (tuple(x.shape), x.dtype), validate=_layernorm_validate,
    # nominal: sum, (x - mean)^2 sum, normalise (subtract, multiply), affine (multiply-add)
    flops=lambda s: 8 * s["R"] * s["C"],
    bytes=lambda s, isz=4: 4 * (2 * s["R"] * s["C"] + 2 * s["C"]),
    shapes={"field": [dict(R=1024, C=1024)], "large": [dict(R=32768, C=4096)],
            "sweep": [dict(R=r, C=1024) for r in (16, 64, 256, 1024, 4096, 16384, 65536, 131072)]},
    awkward=[dict(R=1, C=1), dict(R=1, C=4099), dict(R=5, C=8193), dict(R=33, C=1000), dict(R=0, C=64)],
))
_add(Op(
    name="triangle", args=("A", "B"), equation=r"O_{ijc} = \sum_k A_{ikc} B_{jkc}",
    make_inputs=_triangle_inputs, reference=triangle_reference,
    out_spec=lambda A, B: (tuple(A.shape), A.dtype), validate=_triangle_validate,
    flops=lambda s: 2 * s["N"] ** 3 * s["C"],
    bytes=lambda s, isz=4: 4 * 3 * s["N"] * s["N"] * s["C"],
    shapes={"field": [dict(N=128, C=64)], "large": [dict(N=384, C=128)],
            "sweep": [dict(N=n, C=128) for n in (16, 32, 64, 96, 128, 192, 256, 384)]},
    awkward=[dict(N=1, C=1), dict(N=5, C=3), dict(N=17, C=33), dict(N=33, C=65), dict(N=0, C=4)],
))
_add(Op(
    name="neighbor_agg", args=("graph", "x"), equation=r"y_i = \sum_{j \in N(i)} w_{ij}\, x_j",
    make_inputs=_neighbor_agg_inputs, reference=neighbor_agg_reference,
    out_spec=lambda g, x: ((g.n, x.shape[1]), x.dtype), validate=_neighbor_agg_validate,
    flops=lambda s: 2 * s["n"] * s["deg"] * s["F"],
    # rowptr and col are int32; x is read once in this count, though a gather may read more
    bytes=lambda s, isz=4: 4 * ((s["n"] + 1) + 2 * s["n"] * s["deg"] + 2 * s["n"] * s["F"]),
    shapes={"field": [dict(n=8192, F=64, deg=16, dist="uniform"), dict(n=8192, F=64, deg=16, dist="skewed")],
            "large": [dict(n=1 << 20, F=64, deg=16, dist="uniform"), dict(n=1 << 20, F=64, deg=16, dist="skewed")],
            "sweep": [dict(n=n, F=64, deg=16, dist="uniform")
                      for n in (256, 1024, 4096, 16384, 65536, 262144, 524288, 1 << 20)]},
    awkward=[dict(n=1, F=1, deg=0, dist="uniform"), dict(n=5, F=3, deg=1, dist="skewed"),
             dict(n=37, F=33, deg=3, dist="skewed"), dict(n=64, F=130, deg=5, dist="uniform"),
             dict(n=0, F=8, deg=2, dist="uniform")],
))


def get(name: str) -> Op:
    if name not in OPS:
        raise MageInputError("mage", "op", f"must be one of {list(OPS)}, got {name!r}")
    return OPS[name]
