"""The tests of kernels/rope3: run with pytest from the repository root."""
