"""Test set-up for tests/ and the per-operation tests under kernels/<op>/tests/: GPU tests skip where there
is no CUDA, and the ``poisoned`` fixture every test may ask for."""
import pytest
import torch

from mage.check import poisoned_allocations


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def poisoned():
    """Every tensor PyTorch allocates during the test (outputs, gradients, copies) starts as NaN, on the
    CPU too, so an element a kernel leaves unwritten fails the comparison instead of passing on leftover
    memory (mage.check.poisoned_allocations)."""
    with poisoned_allocations():
        yield
