"""The task form's facets (``mage.facets``): how the book names and draws it, how its requests batch, and
the operations it calls. Its mathematics is ``spec.py``."""
from kernels.mlp_block.facets import ELEMENTWISE, GEMM, LAYERNORM
from mage import facets
from mage.ext.amdahl.parts import Part
from mage.ext.service.batching import Batching

from .spec import NAME

PARTS = (Part("layernorm", LAYERNORM, lambda s: [dict(R=s.get("B", 1) * s["N"] ** 2, C=s["D"]),
                                                  dict(R=s.get("B", 1) * s["N"] ** 2, C=s["H"])]),
         Part("gate", (r"sigmoid", r"mulfunctor")),
         Part("triangle", (r"_batched_gemm", r"_transpose", r"_triangle", r"copy", r"clone"),
              lambda s: [dict(N=s["N"], C=s.get("B", 1) * s["H"])], split_from="matmul"),  # B complexes: B x H contractions
         Part("matmul", GEMM, lambda s: [dict(M=s.get("B", 1) * s["N"] ** 2, K=s["D"], N=5 * s["H"]),
                                         dict(M=s.get("B", 1) * s["N"] ** 2, K=s["H"], N=s["D"])]),
         Part("elementwise", ELEMENTWISE))

facets.declare(
    NAME, label="triangle update (GPU MODE form)", short="triangle update, task form", order=115,
    marker="triangle-up", work="flops",
    # a request is one complex (B = 1 of x and its mask); B requests lie side by side on the batch axis
    batch=Batching(size="B", axes={"x": 0, "mask": 0}, items=1, count=lambda s: s.get("B", 1) * s["N"] ** 2),
    parts=PARTS,
)
