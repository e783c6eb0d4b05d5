"""Backend checks on a GPU machine (skipped without one)."""

import numpy as np
import pytest

from ivote import _backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs a CUDA GPU with CuPy"),
]


def test_cupy_selected(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "cupy")
    xp = _backend.default_xp()
    assert xp.__name__ == "cupy"
    assert _backend.backend_name(xp).startswith("GPU: ")
    monkeypatch.delenv("IVOTE_BACKEND")
    assert _backend.default_xp() is xp  # auto picks the GPU too
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    assert _backend.default_xp() is np


def test_selftest_kernel_compiles_and_runs(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "cupy")
    from ivote._selftest import kernel_selftest

    assert kernel_selftest().startswith("ok")


def test_loader_is_memoized():
    name = "ivote_scaled_add<double>"
    kwargs = dict(defines={"SELFTEST_OFFSET": 1}, name_expressions=(name,))
    assert _backend.load_module("selftest", **kwargs) is _backend.load_module("selftest", **kwargs)
    other = _backend.load_module("selftest", defines={"SELFTEST_OFFSET": 2}, name_expressions=(name,))
    assert other is not _backend.load_module("selftest", **kwargs)


def test_transfers_and_modules():
    xp = _backend.default_xp()
    host = np.arange(12.0).reshape(3, 4)
    dev = _backend.to_device(host)
    assert _backend.is_device_array(dev)
    assert _backend.get_array_module(dev) is xp
    np.testing.assert_array_equal(_backend.to_host(dev), host)
    assert _backend.ndimage_module(xp).__name__ == "cupyx.scipy.ndimage"
    _backend.free_gpu_memory()
