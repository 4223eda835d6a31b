"""The tests of kernels/trimul_block: run with pytest from the repository root."""
