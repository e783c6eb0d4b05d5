"""Shared test configuration: markers are registered in pyproject.toml."""

import importlib.metadata
import os
import shutil
import sys
import tempfile

import pytest

from ivote._backend import cupy_available

# Without napari installed (Python 3.10: napari >= 0.9 needs 3.11), the folder tests/napari would be
# imported as a namespace package named "napari": make ``import napari`` fail, so its tests skip.
try:
    importlib.metadata.distribution("napari")
except importlib.metadata.PackageNotFoundError:
    sys.modules.setdefault("napari", None)

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


@pytest.fixture(scope="session")
def zarr_api():
    """What tests that write Zarr fixtures need across Zarr 3 and Zarr 2 (Python 3.10).

    ``v2``: the keywords that make a format-2 store; ``add(group, name, data)``: a new array of a group;
    ``need_v3()``: skip where the store under test is a Zarr v3 one.
    """
    import types

    zarr = pytest.importorskip("zarr")
    v3 = int(zarr.__version__.split(".")[0]) >= 3

    def add(group, name, data):
        make = group.create_array if v3 else group.create_dataset
        return make(name, data=data, chunks=data.shape)

    def need_v3():
        if not v3:
            pytest.skip("Zarr v3 stores need zarr >= 3 (Python >= 3.11)")

    return types.SimpleNamespace(v3=v3, v2={"zarr_format": 2} if v3 else {}, add=add, need_v3=need_v3)
