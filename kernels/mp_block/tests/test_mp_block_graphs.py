"""The custom message-passing block as one CUDA graph ('triton_graphs'): the blocks' shared graph tests
(tests/support/block_graphs.py) at this block's shapes; the spec must name the spoiled argument."""
from __future__ import annotations

from tests.support.block_graphs import block_graph_tests

# put the tests in this module's namespace, where pytest collects them under their own names
globals().update(block_graph_tests(
    "mp_block", small=dict(n=37, F=33, H=17, deg=24), empty=dict(n=0, F=3, H=5, deg=2),
    bad=("W1", lambda t: t[:, :-1]),  # a spoiled shape
    gpu_shapes=[dict(n=1, F=128, H=128, deg=24), dict(n=500, F=33, H=17, deg=24)]))
