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


@pytest.mark.parametrize("chunk_bytes, slots", [(4096, 2), (1000, 3), (1 << 22, 16)])
def test_staged_transfer_round_trip(monkeypatch, chunk_bytes, slots):
    # several passes around the ring of pinned buffers, a last chunk shorter than the others
    monkeypatch.setattr(_backend, "STAGE_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(_backend, "STAGE_SLOTS", slots)
    xp = _backend.default_xp()
    host = np.random.default_rng(3).integers(0, 2**63, size=(10_007, 2), dtype=np.int64)
    seen = []
    sums = []
    flat = None

    def on_chunk(start, stop):
        seen.append((start, stop))
        sums.append(flat[start:stop].sum())  # queued on the current stream: must see the chunk

    out = xp.empty(host.shape, dtype=host.dtype)
    flat = out.reshape(-1)
    device = _backend.to_device_staged(host, xp, on_chunk=on_chunk, out=out)
    assert device is out
    np.testing.assert_array_equal(_backend.to_host(device), host)
    starts = [start for start, _ in seen]
    assert starts == sorted(starts) and seen[0][0] == 0 and seen[-1][1] == host.size
    assert all(a[1] == b[0] for a, b in zip(seen, seen[1:]))
    expected = [host.reshape(-1)[start:stop].sum() for start, stop in seen]
    np.testing.assert_array_equal([int(s) for s in sums], expected)
    pinned = _backend.to_host_pinned([device, device[:0]], xp)
    np.testing.assert_array_equal(pinned[0], host)
    assert pinned[1].shape == (0, 2)
    with pytest.raises(ValueError, match="out"):
        _backend.to_device_staged(host, xp, out=xp.empty(3, dtype=host.dtype))
