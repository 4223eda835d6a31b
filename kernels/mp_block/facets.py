"""The message-passing layer's facets (``mage.facets``): how the book names and draws it, how the
harness rotates its inputs for cold-cache timing and costs the graph it generated, how its requests
batch when served, and the operations it calls (the Amdahl attribution). Its mathematics is ``spec.py``."""
import torch

from kernels.mlp_block.facets import ELEMENTWISE, GELU, GEMM, LAYERNORM
from kernels.neighbor_agg.graph import CSRGraph
from mage import facets
from mage.ext.amdahl.parts import Part
from mage.ext.service.batching import Batching
from mage.ops import randn

from ._union import GraphUnion
from .spec import OP, layer_inputs


def other_set(shape, probe, seed, dtype):
    """Cold-cache rotation: the probe's graph structure in memory of its own (so every size a compiled
    graph specialises on, the edge count among them, stays the same), fresh features and weights."""
    g, h = probe[0], probe[1]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    graph = CSRGraph.build(g.rowptr.clone(), g.col.clone(), g.w.clone(), g.n_src, op=OP)
    dt = h.dtype
    fresh = randn(tuple(h.shape), gen, "cuda", "normal").to(dt)
    return (graph, fresh) + layer_inputs(shape["F"], shape["H"], gen, "cuda", dt)


def actual_shape(shape, inputs):
    """The cost model at the generated graph's actual mean degree, not the nominal one."""
    g = inputs[0]
    return dict(shape, deg=g.nnz / max(g.n, 1))


# imported when asked, not at the top: the launcher registers implementations, which discovery allows
# only once every spec and facet is in, and reading a label should not import Triton
def _ln_tiles(dtype):
    """The LayerNorm tiles the custom block passes (the same at both precisions)."""
    from .triton_block import LN_TILES
    return LN_TILES


def _gemm_tiles(dtype):
    """The GEMM tiles the custom block's default road passes at ``dtype`` (None on the cuBLAS road)."""
    from kernels.matmul.triton_epilogue import as_matmul_config

    from .triton_block import TILES
    c = TILES[dtype].base_config()
    return as_matmul_config(c) if c["GEMM"] == "fused" else None


# The operations the layer calls, at its shape. The aggregation's PyTorch kernels are a gather
# (indexSelect..., or vectorized_gather_kernel, which the first H200 profile left unclaimed as 'other'
# before this pattern), the weighting (the layer's only MulFunctor), the zeroed sum (FillFunctor) and the
# scatter-add (indexFunc...); the custom column's is the project's _neighbor_agg_kernel. Its operation
# is measured on the aggregation's own uniform random graph at the layer's size and mean degree, not on
# the radius graph (the same rows and degrees; neighbours less local in memory).
PARTS = (Part("neighbor_agg", (r"index_?add", r"indexfunc", r"gather", r"index_?select", r"indexselect",
                               r"scatter", r"mulfunctor", r"fillfunctor", r"neighbor_agg", r"spmm", r"csr"),
              lambda s: [dict(n=s["n"], F=s["F"], deg=int(round(s["deg"])), dist="uniform")]),
         Part("layernorm", LAYERNORM, lambda s: [dict(R=s["n"], C=s["F"])], tiles=_ln_tiles),
         Part("bias_gelu", GELU, lambda s: [dict(R=s["n"], C=s["H"])]),
         # the block's default road at both precisions: the epilogue GEMM (tf32x3 at FP32)
         Part("matmul", GEMM, lambda s: [dict(M=s["n"], K=s["F"], N=s["H"]), dict(M=s["n"], K=s["H"], N=s["F"])],
              custom={"fp32": "triton@fp32x3", "bf16": "triton"}, tiles=_gemm_tiles),
         Part("elementwise", ELEMENTWISE))  # the residual

facets.declare(
    OP, label="message-passing layer", short="message passing", order=120, marker="x", work="flops",
    other_set=other_set, actual_shape=actual_shape,
    # a request is one graph (its structure and features) of the field size; a batch is the disjoint
    # union of its requests' graphs (``_union``); throughput counts nodes
    batch=Batching(size="n", axes={"graph": 0, "h": 0}, items=16384, join=GraphUnion()),
    parts=PARTS,
)
