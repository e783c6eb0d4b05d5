"""Class 7 of issue 16, the GPU: running out of GPU memory gives a clear ResourceLimitError
(never a CUDA traceback or a poisoned context), frees every cached buffer, and the next
run works and gives the NumPy answer. Out-of-memory is provoked with a small limit on
CuPy's memory pool, not by filling the GPU: ``gpu_pool.cap(n)`` (tests/gpu/conftest.py) lets a run add
``n`` bytes to the pool, whatever earlier tests left in it."""

import numpy as np
import pytest

import ivote._backend
from ivote import ConvRBM, ResourceLimitError, iterative_voting, segment_nuclei
from ivote._backend import to_host
from ivote.data import synthetic_nuclei
from ivote.metrics import match_labels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not ivote._backend.cupy_available(), reason="needs CuPy and a GPU"),
]

OOM_MESSAGE = r"the GPU ran out of memory .*backend='numpy' \(IVOTE_BACKEND=numpy\)"


@pytest.fixture(scope="module")
def sample():
    return synthetic_nuclei((256, 256), radius=6, seed=7)


def test_detect_out_of_memory_is_clear_and_the_next_run_works(gpu_pool, sample):
    image = sample.image
    expected = iterative_voting(image, radius=6, backend="numpy")
    iterative_voting(image, radius=6, backend="cupy")  # compiled, and a CUDA graph on the next call
    iterative_voting(image, radius=6, backend="cupy")
    gpu_pool.cap(64 * 1024)
    with pytest.raises(ResourceLimitError, match="iterative_voting: " + OOM_MESSAGE) as info:
        iterative_voting(synthetic_nuclei((384, 384), radius=6, seed=8).image, radius=6, backend="cupy")
    assert isinstance(info.value, MemoryError) and info.value.__context__ is None
    gpu_pool.lift()
    again = iterative_voting(image, radius=6, backend="cupy")
    np.testing.assert_array_equal(again.points, expected.points)


def test_segment_out_of_memory_is_clear_and_the_next_run_works(gpu_pool, sample):
    kwargs = dict(radius=6, iterations=100, tol=0)
    first = to_host(segment_nuclei(sample.image, sample.centers, backend="cupy", **kwargs))
    # a larger image than any test segmented before: buffers kept from earlier calls cannot serve it
    larger = synthetic_nuclei((384, 384), radius=6, seed=9)
    gpu_pool.cap(64 * 1024)
    with pytest.raises(ResourceLimitError, match="segment_nuclei: " + OOM_MESSAGE):
        segment_nuclei(larger.image, larger.centers, backend="cupy", **kwargs)
    gpu_pool.lift()
    again = to_host(segment_nuclei(sample.image, sample.centers, backend="cupy", **kwargs))
    assert match_labels(again, first).f1 >= 0.99 and len(np.unique(again)) > 10


def test_convrbm_out_of_memory_is_clear_and_the_next_fit_works(gpu_pool, sample):
    import cupy

    image = sample.image[:128, :128]
    gpu_pool.cap(16 * 1024)
    with pytest.raises(ResourceLimitError, match="ConvRBM: " + OOM_MESSAGE):
        ConvRBM(8, 7, xp=cupy).fit(image, epochs=1)
    gpu_pool.lift()
    model = ConvRBM(8, 7, xp=cupy).fit(image, epochs=1)
    assert bool(cupy.isfinite(model.filters_).all())


def test_cli_reports_gpu_out_of_memory_in_one_line(gpu_pool, sample, tmp_path, capsys):
    import tifffile

    from ivote.cli import main

    path = tmp_path / "image.tif"
    tifffile.imwrite(path, sample.image.astype(np.float32))
    gpu_pool.cap(16 * 1024)
    status = main(["detect", str(path), "--radius", "6", "--backend", "cupy", "--out", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "the GPU ran out of memory" in err
    assert not (tmp_path / "p.csv").exists()
    gpu_pool.lift()
    assert main(["detect", str(path), "--radius", "6", "--backend", "cupy", "--out", str(tmp_path / "p.csv")]) == 0


def test_gpu_work_limit(monkeypatch, sample):
    monkeypatch.setenv("IVOTE_MAX_WORK_GPU", "1e5")
    with pytest.raises(ResourceLimitError, match=r"above the limit of 1e\+05 \(IVOTE_MAX_WORK_GPU\)"):
        iterative_voting(sample.image, radius=6, backend="cupy")
    monkeypatch.delenv("IVOTE_MAX_WORK_GPU")
    assert len(iterative_voting(sample.image, radius=6, backend="cupy").points) > 0


@pytest.mark.parametrize("shape", [(2, 64, 64), (1, 64, 64), (64, 2)])
def test_gpu_refuses_thin_axes_as_numpy(shape):
    image = np.random.default_rng(0).normal(size=shape)
    with pytest.raises(ValueError, match=r"at least 3 along every axis"):
        iterative_voting(image, radius=3, backend="cupy")


# --- class 1 on the GPU: the bump test of the contrast (ramps, gradients, wide blobs) -----------------------


def _smooth_cases():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "reliability"))
    from smooth_images import nuclei_on_backgrounds, smooth_images

    cases = {name: (image, radius, polarity) for name, (image, radius, polarity, _) in smooth_images().items()}
    cases.update({name: (image, radius, "dark" if "dark" in name else "bright")
                  for name, (image, _, radius) in nuclei_on_backgrounds().items()})
    return cases


SMOOTH_CASES = _smooth_cases()


@pytest.mark.parametrize("name", list(SMOOTH_CASES))
def test_gpu_contrasts_equal_numpy_on_smooth_images(name):
    """ivote_contrast (symmetric window, bump ring) gives NumPy's candidates and contrasts
    bit for bit, and so the same cells: none on ramps, gradients and wide blobs."""
    image, radius, polarity = SMOOTH_CASES[name]
    expected = iterative_voting(image, radius=radius, polarity=polarity, backend="numpy")
    for _ in range(2):  # the second call replays the CUDA graph
        got = iterative_voting(image, radius=radius, polarity=polarity, backend="cupy")
        np.testing.assert_array_equal(got.candidates, expected.candidates)
        np.testing.assert_array_equal(got.candidate_contrasts, expected.candidate_contrasts)
        np.testing.assert_array_equal(got.points, expected.points)


def test_gpu_contrast_kernel_on_random_cells_equals_the_reference():
    """The kernel alone, on every local maximum of a random vote field over smooth noise
    plus a ramp (dark polarity), 2D and 3D: _check_contrast_kernels."""
    import cupy

    from ivote.detect import _cuda
    from ivote.detect._plan import make_plan

    rng = np.random.default_rng(12)
    for shape, radius, spacing in (((70, 90), 6.5, (1.0, 1.0)), ((14, 40, 44), 4.5, (2.0, 1.0, 1.0))):
        from scipy import ndimage

        image = ndimage.gaussian_filter(rng.random(shape), 1.5) + np.linspace(0, 0.05, shape[-1])
        plan = make_plan(radius, spacing, len(shape))
        votes = cupy.asarray(rng.integers(0, 50, size=shape).astype(np.uint32))
        _cuda._check_contrast_kernels(cupy, image, plan, votes)  # raises if they differ
