"""The tests of kernels/neighbor_agg: run with pytest from the repository root."""
