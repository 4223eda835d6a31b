"""The PyTorch columns of neighbour aggregation: the gather / weight / scatter-add idiom of message
passing, eager and compiled (at FP32 and bf16), and cuSPARSE (torch.sparse.mm on a CSR tensor, FP32
only), the library a user would pick for a sparse-dense product.

At bf16 the messages are promoted to FP32 by the FP32 edge weights (PyTorch's type promotion), so the
sum over neighbours accumulates in FP32 and is rounded to bf16 once at the end: ``index_add_`` into a
bf16 tensor would round after every edge, an error that grows with the degree. The message-passing
block's eager column aggregates through this expression."""
import torch

from kernels._pytorch import into, register_expression
from mage import facets
from mage.errors import MageInputError
from mage.registry import register


def expression(graph, x):
    # gather the neighbours, weight them, scatter-add into their rows (in the messages' dtype: FP32)
    msg = x.index_select(0, graph.col) * graph.w[:, None]
    y = torch.zeros((graph.n, x.shape[1]), dtype=msg.dtype, device=x.device).index_add_(0, graph.row, msg)
    return y.to(x.dtype)  # bf16: the one rounding; FP32: no copy


register_expression("neighbor_agg", expression, dtypes=("fp32", "bf16"))


def _csr_prepare(graph, x):
    """The CSR tensor, built once. cuSPARSE sums repeated (row, column) entries itself, as every other
    implementation does, but refuses to describe a matrix with more stored entries than it has cells
    (cusparseCreateCsr: invalid value), which a multigraph on few nodes can have; only such a graph is
    coalesced first (duplicates summed), so every measured graph reaches cuSPARSE exactly as built."""
    if x.dtype != graph.w.dtype:  # torch.sparse.mm takes one dtype, and the graph's weights are FP32
        raise MageInputError("neighbor_agg", "x", f"must be float32 for the cuSPARSE column (FP32 only), got "
                             f"{str(x.dtype).replace('torch.', '')}")
    rowptr, col, w = graph.rowptr, graph.col, graph.w
    if graph.nnz > graph.n * graph.n_src:
        C = torch.sparse_coo_tensor(torch.stack([graph.row.long(), col.long()]), w,
                                    (graph.n, graph.n_src), check_invariants=False).coalesce().to_sparse_csr()
        rowptr, col, w = C.crow_indices().int(), C.col_indices().int(), C.values()
    # the graph was validated once by CSRGraph.build: torch need not check the structure again
    S = torch.sparse_csr_tensor(rowptr, col, w, size=(graph.n, graph.n_src), check_invariants=False)
    return S, x


facets.declare_column("cusparse", label="cuSPARSE (torch.sparse)", order=2, color="#009E73")  # a library column


@register("neighbor_agg", "cusparse", family="pytorch",
          prepare=_csr_prepare, config={"call": "torch.sparse.mm", "matrix": "CSR, built in prepare"})
def cusparse(S, x, out=None):
    return into(out, torch.sparse.mm(S, x))
