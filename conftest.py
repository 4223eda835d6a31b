"""Test set-up for tests/ and the per-operation tests under kernels/: GPU tests skip where there is no CUDA,
and the book's tests share one xdist worker (one build of the book, one browser) under --dist loadgroup."""
import pytest
import torch


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "book" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("book"))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
