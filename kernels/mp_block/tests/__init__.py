"""The tests of kernels/mp_block: run with pytest from the repository root."""
