"""The custom MLP block as one CUDA graph ('triton_graphs'): the blocks' shared graph tests
(tests/support/block_graphs.py) at this block's shapes; the spec must name the spoiled argument."""
from __future__ import annotations

from tests.support.block_graphs import block_graph_tests

# put the tests in this module's namespace, where pytest collects them under their own names
globals().update(block_graph_tests(
    "mlp_block", small=dict(T=3, d=37, hidden=19), empty=dict(T=0, d=5, hidden=3),
    bad=("W1", lambda t: t[:, :-1]),  # a spoiled shape
    gpu_shapes=[dict(T=1, d=768, hidden=3072), dict(T=77, d=129, hidden=515)]))
