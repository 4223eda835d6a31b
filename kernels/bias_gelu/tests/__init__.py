"""The tests of kernels/bias_gelu: run with pytest from the repository root."""
