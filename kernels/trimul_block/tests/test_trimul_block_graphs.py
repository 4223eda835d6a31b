"""The custom triangle-update block as one CUDA graph ('triton_graphs'): the blocks' shared graph tests
(tests/support/block_graphs.py) at this block's shapes; the spec must name the spoiled argument."""
from __future__ import annotations

from tests.support.block_graphs import block_graph_tests

# put the tests in this module's namespace, where pytest collects them under their own names
globals().update(block_graph_tests(
    "trimul_block", small=dict(N=5, C=7, H=3), empty=dict(N=0, C=3, H=5),
    bad=("mask", lambda t: t[:-1]),  # a spoiled shape
    gpu_shapes=[dict(N=1, C=128, H=128), dict(N=37, C=20, H=11)]))
