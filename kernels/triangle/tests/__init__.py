"""The tests of kernels/triangle: run with pytest from the repository root."""
