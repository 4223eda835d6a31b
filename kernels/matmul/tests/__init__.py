"""The tests of kernels/matmul: run with pytest from the repository root."""
