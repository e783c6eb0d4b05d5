"""Shared test configuration: markers are registered in pyproject.toml."""

import pytest

from ivote._backend import cupy_available


def pytest_collection_modifyitems(config, items):
    # A GPU test that forgot its own skip still skips cleanly without a GPU.
    if cupy_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
