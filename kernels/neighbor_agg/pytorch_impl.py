"""The PyTorch columns of neighbour aggregation: the gather / weight / scatter-add idiom of message
passing, eager and compiled, and cuSPARSE (torch.sparse.mm on a CSR tensor), the library a user
would pick for a sparse-dense product."""
import torch

from kernels._pytorch import COLOR, ORDER, into, register_expression
from mage.registry import register


def expression(graph, x):
    # gather the neighbours, weight them, scatter-add into their rows
    msg = x.index_select(0, graph.col) * graph.w[:, None]
    return torch.zeros((graph.n, x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, graph.row, msg)


register_expression("neighbor_agg", expression)


def _csr_prepare(graph, x):
    """The CSR tensor, built once. cuSPARSE sums repeated (row, column) entries itself, as every other
    implementation does, but refuses to describe a matrix with more stored entries than it has cells
    (cusparseCreateCsr: invalid value), which a multigraph on few nodes can have; only such a graph is
    coalesced first (duplicates summed), so every measured graph reaches cuSPARSE exactly as built."""
    rowptr, col, w = graph.rowptr, graph.col, graph.w
    if graph.nnz > graph.n * graph.n_src:
        C = torch.sparse_coo_tensor(torch.stack([graph.row.long(), col.long()]), w,
                                    (graph.n, graph.n_src)).coalesce().to_sparse_csr()
        rowptr, col, w = C.crow_indices().int(), C.col_indices().int(), C.values()
    S = torch.sparse_csr_tensor(rowptr, col, w, size=(graph.n, graph.n_src))
    return S, x


@register("neighbor_agg", "cusparse", family="pytorch", order=ORDER["cusparse"], label="cuSPARSE (torch.sparse)",
          color=COLOR["cusparse"],
          prepare=_csr_prepare, config={"call": "torch.sparse.mm", "matrix": "CSR, built in prepare"})
def cusparse(S, x, out=None):
    return into(out, torch.sparse.mm(S, x))
