"""The custom MLP block as a CUDA graph ('triton_graphs'): the 'triton' column's launches (its
default road at each precision) recorded once per input signature and replayed as one graph launch, with the inputs
copied into the graph's static buffers on each call (``kernels/_triton/graphed.py``).
Its training step (``mage.ext.training.train``) is the plain column's training path with the whole step (forward,
backward and the AdamW update) recorded as one CUDA graph."""
from kernels._triton.graphed import register_graphed

from .spec import SPEC
from .triton_block import mlp_block
from . import triton_train  # noqa: F401 - the training path this column records (registered first)

GRAPHED = register_graphed(SPEC, mlp_block, config=dict(of="triton"), train=True)
