"""The tests of kernels/mlp_block: run with pytest from the repository root."""
