import numpy as np
import pytest

from ivote import _backend
from ivote._backend import BackendError


def test_numpy_forced(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    assert _backend.default_xp() is np
    assert "NumPy" in _backend.backend_name()


def test_bad_backend_value(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "tensorflow")
    with pytest.raises(BackendError, match="IVOTE_BACKEND must be 'auto', 'cupy', 'numba' or 'numpy'"):
        _backend.default_xp()


@pytest.mark.skipif(_backend.cupy_available(), reason="this machine has a GPU")
def test_forcing_cupy_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "cupy")
    with pytest.raises(BackendError, match="no usable GPU"):
        _backend.default_xp()
    with pytest.raises(BackendError, match="needs CuPy and a GPU"):
        _backend.load_module("selftest")


@pytest.mark.skipif(_backend.cupy_available(), reason="this machine has a GPU")
def test_auto_without_gpu_is_numpy(monkeypatch):
    monkeypatch.delenv("IVOTE_BACKEND", raising=False)
    assert _backend.default_xp() is np
    assert _backend.backend_name().endswith("(no GPU found)")


def test_host_helpers():
    a = np.arange(6.0).reshape(2, 3)
    assert _backend.get_array_module(a) is np
    assert _backend.get_array_module(a, [1, 2]) is np
    assert _backend.to_host(a) is a
    np.testing.assert_array_equal(_backend.to_device(a, np), a)
    assert _backend.ndimage_module(np).__name__ == "scipy.ndimage"
    assert _backend.fft_module(np).__name__ == "scipy.fft"
    assert _backend.index_type(a) == "int"
    _backend.synchronize(np)
    _backend.free_gpu_memory()


def test_every_kernel_source_is_package_data():
    from importlib import resources

    names = sorted(p.name for p in (resources.files("ivote") / "kernels").iterdir() if p.name.endswith(".cu"))
    assert "selftest.cu" in names
    for name in names:
        source = _backend.kernel_source(name[:-3])
        assert "__global__" in source, name
        assert "ivote_" in source, f"{name}: kernel names are namespaced ivote_*"


def test_missing_kernel_source():
    with pytest.raises(FileNotFoundError, match="no CUDA source"):
        _backend.kernel_source("does_not_exist")


def test_select_xp(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    a = np.zeros(3)
    assert _backend.select_xp("numpy", a) is np
    assert _backend.select_xp("auto", a) is np
    with pytest.raises(ValueError, match="backend must be 'auto', 'numpy', 'numba' or 'cupy'"):
        _backend.select_xp("gpu", a)
    if not _backend.cupy_available():
        with pytest.raises(BackendError, match="backend='cupy' was requested"):
            _backend.select_xp("cupy", a)


def test_free_gpu_memory_runs_the_release_hooks(monkeypatch):
    """Modules that keep GPU buffers between calls (the detector's CUDA graphs)
    register a hook; free_gpu_memory runs each once, with or without a GPU."""
    from ivote.detect import _cuda, _cuda_graph

    calls = []
    monkeypatch.setattr(_backend, "_release_hooks", list(_backend._release_hooks))
    hook = _backend.on_free_gpu_memory(lambda: calls.append(1))
    assert _backend.on_free_gpu_memory(hook) is hook  # registered once
    assert _cuda.release_graphs in _backend._release_hooks
    _cuda_graph._graphs_seen["key"] = True
    _backend.free_gpu_memory()
    assert calls == [1] and not _cuda_graph._graphs_seen


def test_free_gpu_memory_drops_memoized_tables():
    """The detector's memoized tables and the ConvRBM's twiddle matrices are
    dropped too (on a GPU they are device arrays), and rebuilt on demand."""
    from ivote.detect import _cuda_tables
    from ivote.features import _spectral

    first = _spectral._twiddles((0, 1, 2), 8, 5, -1, np.complex128, np)
    assert _spectral._twiddle_cache
    with _cuda_tables._cache_lock:
        _cuda_tables._cache["key"] = (np.zeros(3), 24)
    _cuda_tables._taps["key"] = np.ones(1)
    _backend.free_gpu_memory(keep_tables=True)  # between the blocks of a chunked run
    assert _spectral._twiddle_cache and _cuda_tables._cache and _cuda_tables._taps
    with _backend.pin_gpu_tables():  # a block runs: another thread's release keeps them too
        _backend.free_gpu_memory()
    assert _spectral._twiddle_cache and _cuda_tables._cache and _cuda_tables._taps
    _backend.free_gpu_memory()
    assert not _spectral._twiddle_cache and not _cuda_tables._cache and not _cuda_tables._taps
    np.testing.assert_array_equal(_spectral._twiddles((0, 1, 2), 8, 5, -1, np.complex128, np), first)
