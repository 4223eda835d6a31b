"""The triangle update's facets (``mage.facets``): how the book names and draws it, how its requests
batch when served, and the operations it calls with the kernel names and tiles of each (the Amdahl
attribution). Its mathematics is ``spec.py``."""
from kernels.mlp_block.facets import ELEMENTWISE, GEMM, LAYERNORM
from mage import facets
from mage.ext.amdahl.parts import Part
from mage.ext.service.batching import Batching

from .spec import NAME


# The operations the update calls, at its shape. The custom column runs both LayerNorms, the gates and
# the contraction as the project's Triton kernels and keeps the projections on cuBLAS. The PyTorch
# columns run the einsum as layout copies and a cuBLAS batched GEMM, whose kernel names are the
# projections' own: that GEMM time is shared between the two by their own times at these shapes.
def _block_config(dtype) -> dict:
    # imported when asked, not at the top: the launcher registers implementations, which discovery
    # allows only once every spec and facet is in, and reading a label should not import Triton
    from .triton_block import TILES
    return TILES[dtype].base_config()


def _ln_tiles(dtype) -> dict:
    """The LayerNorm tiles the custom block passes (its rows of C or H = 128 channels, several a program)."""
    c = _block_config(dtype)
    return dict(BLOCK_R=c["LN_BLOCK_R"], num_warps=c["LN_WARPS"], EVICT=c["LN_EVICT"])


def _gemm_tiles(dtype):
    """The projections' tiles on the custom block's default road (None on the cuBLAS road)."""
    from kernels.matmul.triton_epilogue import as_matmul_config
    c = _block_config(dtype)
    if c["GEMM"] != "fused":
        return None
    return as_matmul_config(dict(BLOCK_M=c["GEMM_M"], BLOCK_N=c["GEMM_N"], BLOCK_K=c["GEMM_K"],
                                 num_warps=c["GEMM_WARPS"], num_stages=c["GEMM_STAGES"]))


PARTS = (Part("layernorm", LAYERNORM, lambda s: [dict(R=s["N"] ** 2, C=s["C"]), dict(R=s["N"] ** 2, C=s["H"])],
              tiles=_ln_tiles),
         # the sigmoid gates and the mask: PyTorch's sigmoid and MulFunctor kernels, the block's own
         # _gate_kernel and _out_gate_kernel (no operation of their own: their speedup is not measured)
         Part("gate", (r"sigmoid", r"_gate_kernel", r"mulfunctor")),
         Part("triangle", (r"_batched_gemm", r"_transpose", r"_triangle", r"copy", r"clone"),
              lambda s: [dict(N=s["N"], C=s["H"])], split_from="matmul"),
         Part("matmul", GEMM, lambda s: [dict(M=s["N"] ** 2, K=s["C"], N=4 * s["H"] + s["C"]),
                                         dict(M=s["N"] ** 2, K=s["H"], N=s["C"])],
              # the block's default road: the tf32x3 epilogue GEMM at FP32, cuBLAS at bf16
              custom={"fp32": "triton@fp32x3", "bf16": "pytorch"}, tiles=_gemm_tiles),
         Part("elementwise", ELEMENTWISE))  # the biases

facets.declare(
    NAME, label="triangle multiplicative update", short="triangle update", order=110, marker="triangle-down",
    work="flops",
    # a request is one complex (z and its pair mask) at N = 384, AlphaFold 3's and Boltz's crop; a batch
    # stacks complexes on a new leading axis; throughput counts pairs (B N^2)
    batch=Batching(size="N", axes={"z": 0, "mask": 0}, stack=True, items=384, count=lambda s: s["N"] ** 2),
    parts=PARTS,
)
