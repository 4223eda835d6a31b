"""Kernels for the five operations: PyTorch baselines, Triton and Rust. Each module registers itself with mage."""
