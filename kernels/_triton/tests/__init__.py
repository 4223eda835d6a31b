"""The tests of kernels/_triton: run with pytest from the repository root."""
