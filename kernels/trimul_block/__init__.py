"""trimul_block: the triangular multiplicative update (outgoing edges) as a model block: its spec, its
implementations and its tests, in one folder."""
