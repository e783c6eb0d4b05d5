"""Shared test configuration: markers are registered in pyproject.toml."""

import os
import shutil
import tempfile

import pytest

from ivote._backend import cupy_available

_CACHE = None


def pytest_configure(config):
    # The tests' trained shape priors go to a folder of their own, not the user's ~/.cache/ivote.
    global _CACHE
    if "IVOTE_CACHE_DIR" not in os.environ:
        _CACHE = tempfile.mkdtemp(prefix="ivote-test-cache-")
        os.environ["IVOTE_CACHE_DIR"] = _CACHE


def pytest_unconfigure(config):
    if _CACHE is not None:
        os.environ.pop("IVOTE_CACHE_DIR", None)
        shutil.rmtree(_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    # A GPU test that forgot its own skip still skips cleanly without a GPU.
    if cupy_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
