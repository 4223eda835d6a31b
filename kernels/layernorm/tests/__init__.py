"""The tests of kernels/layernorm: run with pytest from the repository root."""
