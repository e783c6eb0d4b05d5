"""The per-machine disk cache (ivote._disk_cache) and the shape prior kept in it: the cached
prior is the trained one, bit for bit; a change of parameters or of the training code is a
new file; a damaged file or a folder that cannot be written costs only the computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ivote import _disk_cache
from ivote.segment import _shape_prior


def _uncached(ndim, **kw):
    args = dict(n_training=_shape_prior.N_TRAINING, axis_sigma=0.15, seed=0) | kw
    return _shape_prior._train(ndim, **args)


def _train_fresh(ndim, **kw):
    _shape_prior.train_shape_prior.cache_clear()  # the in-process memo, so the disk is asked
    try:
        return _shape_prior.train_shape_prior(ndim, **kw)
    finally:
        _shape_prior.train_shape_prior.cache_clear()


def _assert_same_prior(got, want):
    for a, b in zip(got[:3], want[:3]):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert got.extent == want.extent and isinstance(got.extent, float)


def test_cached_prior_is_the_trained_prior_and_is_read_back(monkeypatch, tmp_path):
    monkeypatch.setenv("IVOTE_CACHE_DIR", str(tmp_path))
    want = _uncached(2)
    first = _train_fresh(2)
    files = list(tmp_path.glob("shape_prior-*.npz"))
    assert len(files) == 1
    _assert_same_prior(first, want)
    # the second call reads the file: make the training fail to prove it is not run again
    monkeypatch.setattr(_shape_prior, "_train", lambda *a, **k: pytest.fail("trained again despite the cache"))
    _assert_same_prior(_train_fresh(2), want)


def test_other_parameters_or_code_are_another_file(monkeypatch, tmp_path):
    monkeypatch.setenv("IVOTE_CACHE_DIR", str(tmp_path))
    a = _train_fresh(2, seed=1)
    b = _train_fresh(2, seed=2)
    assert len(list(tmp_path.glob("shape_prior-*.npz"))) == 2
    _assert_same_prior(a, _uncached(2, seed=1))
    _assert_same_prior(b, _uncached(2, seed=2))
    # the training code changed (another source file content): a new name, not the old file
    source = tmp_path / "changed_shape_prior.py"
    source.write_text(Path(_shape_prior.__file__).read_text() + "\n# changed\n")
    key = dict(ndim=2, n_training=_shape_prior.N_TRAINING, axis_sigma=0.15, seed=1)
    old = _disk_cache._fingerprint("shape_prior", key, _shape_prior.__file__)
    new = _disk_cache._fingerprint("shape_prior", key, str(source))
    assert old != new
    calls = []
    got = _disk_cache.cached_arrays("shape_prior", key, str(source), lambda: calls.append(1) or {"x": np.arange(3)})
    assert calls == [1] and np.array_equal(got["x"], np.arange(3))


def test_damaged_file_is_recomputed(monkeypatch, tmp_path):
    monkeypatch.setenv("IVOTE_CACHE_DIR", str(tmp_path))
    _train_fresh(2)
    (path,) = tmp_path.glob("shape_prior-*.npz")
    path.write_bytes(b"not an npz file")
    _assert_same_prior(_train_fresh(2), _uncached(2))
    _assert_same_prior(_train_fresh(2), _uncached(2))  # and rewritten whole
    with np.load(path) as stored:
        assert set(stored.files) == {"templates", "sigma", "regression", "extent"}


def test_unwritable_folder_or_cache_off_still_gives_the_prior(monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("IVOTE_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    _assert_same_prior(_train_fresh(2), _uncached(2))
    monkeypatch.setenv("IVOTE_CACHE_DIR", "")
    assert _disk_cache.cache_folder() is None
    _assert_same_prior(_train_fresh(2), _uncached(2))
    assert [p.name for p in tmp_path.iterdir()] == ["a_file"]


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("IVOTE_CACHE_DIR", raising=False)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert _disk_cache.cache_folder() == tmp_path / "numba" / "ivote"
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    folder = _disk_cache.cache_folder()
    assert folder is not None and folder.name == "ivote" and folder.is_absolute()
    monkeypatch.setenv("IVOTE_CACHE_DIR", str(tmp_path / "mine"))
    assert _disk_cache.cache_folder() == tmp_path / "mine"


def test_unreadable_source_computes_without_a_cache(tmp_path):
    """A frozen or .pyc-only install has no source file to fingerprint: the arrays are computed,
    nothing is written, no error."""
    calls = []

    def compute():
        calls.append(1)
        return {"a": np.arange(3)}

    folder = tmp_path / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IVOTE_CACHE_DIR", str(folder))
        got = _disk_cache.cached_arrays("thing", {"k": 1}, str(tmp_path / "missing.py"), compute)
    np.testing.assert_array_equal(got["a"], np.arange(3))
    assert calls == [1] and not folder.exists()
