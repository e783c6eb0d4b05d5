"""Class 2 of issue 16, unbounded work: work and memory are estimated from the arguments
and refused, with the estimate and the limit, before anything is spent. Limits are tested
with small limits (IVOTE_MAX_WORK, IVOTE_MAX_MEMORY), never by exhausting the machine."""

import math

import numpy as np
import pytest
from reliability_helpers import assert_one_line_failure

from ivote import ConvRBM, IvoteError, ResourceLimitError, iterative_voting, segment_nuclei
from ivote._limits import check_budget, format_bytes, max_memory, max_work

RNG = np.random.default_rng(2)


@pytest.fixture(autouse=True)
def _default_limits(monkeypatch):
    for name in ("IVOTE_MAX_MEMORY", "IVOTE_MAX_WORK", "IVOTE_MAX_WORK_GPU"):
        monkeypatch.delenv(name, raising=False)


# --- segment_nuclei: radius and boxes --------------------------------------------------------------------------


@pytest.mark.parametrize("radius", [1e4, 200.0, 48.5])
def test_segment_radius_above_half_the_image_is_refused(radius, nuclei_2d):
    image, centers = nuclei_2d  # 64 x 64: at most 32
    with pytest.raises(IvoteError, match=rf"radius must satisfy 1\.5 <= radius <= 32.*got {radius:g}"):
        segment_nuclei(image, centers[:3], radius=radius, backend="numpy")


def test_segment_memory_estimate_is_refused_with_estimate_and_limit(monkeypatch, nuclei_2d):
    image, centers = nuclei_2d
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "100K")
    with pytest.raises(ResourceLimitError, match=r"segment_nuclei with 38 seeds in boxes of 15x15 .*about 1\.3 MB of "
                                                 r"memory, above the limit of 100 KB \(IVOTE_MAX_MEMORY\)"):
        segment_nuclei(image, centers, radius=4, backend="numpy")


def test_segment_work_estimate_is_refused(monkeypatch, nuclei_2d):
    image, centers = nuclei_2d
    monkeypatch.setenv("IVOTE_MAX_WORK", "1e5")
    with pytest.raises(ResourceLimitError, match=r"about 2\.56e\+06 operations, above the limit of 1e\+05 "
                                                 r"\(IVOTE_MAX_WORK\).*fewer seeds or iterations"):
        segment_nuclei(image, centers, radius=4, iterations=300, backend="numpy")


def test_segment_runs_once_the_limit_is_raised(monkeypatch, nuclei_2d):
    image, centers = nuclei_2d
    monkeypatch.setenv("IVOTE_MAX_WORK", "1e4")  # 4 boxes of 15x15 for 100 iterations: 9e4
    with pytest.raises(ResourceLimitError):
        segment_nuclei(image, centers[:4], radius=4, iterations=100, backend="numpy")
    monkeypatch.setenv("IVOTE_MAX_WORK", "inf")
    labels = segment_nuclei(image, centers[:4], radius=4, iterations=100, backend="numpy")
    assert 1 <= len(np.unique(labels)) - 1 <= 4


# --- iterative_voting: radius, blur, work ----------------------------------------------------------------------


def test_3d_radius_above_half_the_volume_is_refused():
    volume = RNG.random((12, 40, 40))  # used to run 135 s at radius 40
    with pytest.raises(IvoteError, match=r"radius must satisfy 1\.5 <= radius <= 20.*got 40"):
        iterative_voting(volume, radius=40, backend="numpy")


def test_3d_detection_work_is_estimated_and_refused(monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_WORK", "1e7")
    with pytest.raises(ResourceLimitError, match=r"iterative_voting on 12x40x40 pixels with radius 20 \(33370 "
                                                 r"offsets, 6 passes\) would take about 1\.\d+e\+08 operations"):
        iterative_voting(RNG.random((12, 40, 40)), radius=20, backend="numpy")


@pytest.mark.parametrize("blur", [1e6, 1e3, 65.0])
def test_blur_above_the_image_extent_is_refused(blur, nuclei_2d):
    with pytest.raises(IvoteError, match=rf"blur must satisfy 0 <= blur <= 64; got {blur!r}"):
        iterative_voting(nuclei_2d[0], radius=4, blur=blur, backend="numpy")


def test_blur_counts_in_the_work_estimate(monkeypatch, nuclei_2d):
    monkeypatch.setenv("IVOTE_MAX_WORK", "1e6")
    iterative_voting(nuclei_2d[0], radius=4, blur=0.5, backend="numpy")  # about 3e5
    with pytest.raises(ResourceLimitError, match="use a smaller radius or blur"):
        iterative_voting(nuclei_2d[0], radius=4, blur=60, backend="numpy")


def test_detection_memory_limit(monkeypatch, nuclei_2d):
    import re

    from ivote.detect import detection_memory

    monkeypatch.setenv("IVOTE_MAX_MEMORY", "64K")
    for backend in ("numpy", "numba"):
        expected = format_bytes(detection_memory(nuclei_2d[0].shape, 4, backend=backend))
        with pytest.raises(ResourceLimitError, match=rf"about {re.escape(expected)} of memory, above the limit of 64 KB"):
            iterative_voting(nuclei_2d[0], radius=4, backend=backend)


# --- ConvRBM: spectra of many filters -----------------------------------------------------------------------


def test_convrbm_fit_memory_is_refused_before_allocation(monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "100M")
    model = ConvRBM(100_000, 7, xp=np)  # spectra of 100000 maps: tens of GB
    with pytest.raises(ResourceLimitError, match=r"ConvRBM with 100000 filters 7x7 on 64x64 pixels .* GB of memory, "
                                                 r"above the limit of 100 MB.*fewer filters"):
        model.fit(RNG.random((64, 64)), epochs=1)


def test_convrbm_patches_bound_the_memory(monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "2M")
    image = RNG.random((96, 96))
    with pytest.raises(ResourceLimitError):
        ConvRBM(16, 5, xp=np).fit(image, epochs=1)
    model = ConvRBM(16, 5, xp=np).fit(image, epochs=1, patch_shape=(24, 24))
    assert np.isfinite(model.filters_).all()


def test_convrbm_transform_memory_is_refused(monkeypatch):
    model = ConvRBM(64, 5, xp=np).fit(RNG.random((16, 16)), epochs=1)
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "1M")
    with pytest.raises(ResourceLimitError, match="ConvRBM with 64 filters 5x5 on 128x128 pixels"):
        model.transform(RNG.random((128, 128)))


# --- the limits themselves ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [("8G", 8 * 2**30), ("500M", 500 * 2**20), ("2.5e9", 2.5e9), ("64k", 64 * 2**10), ("1GiB", 2**30),
     ("0", math.inf), ("inf", math.inf), ("1T", 2**40)],
)
def test_memory_limit_forms(monkeypatch, text, expected):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", text)
    assert max_memory() == expected


@pytest.mark.parametrize("text", ["lots", "-1", "nan", "8X", "G"])
def test_bad_limit_values_name_the_variable(monkeypatch, text):
    monkeypatch.setenv("IVOTE_MAX_WORK", text)
    with pytest.raises(IvoteError, match=r"environment variable IVOTE_MAX_WORK must be"):
        max_work()


def test_default_limits():
    assert max_work() == 1e10 and max_work(gpu=True) == 1e13
    assert 0 < max_memory() < math.inf


def test_limit_error_is_a_value_and_a_memory_error():
    with pytest.raises(ResourceLimitError) as info:
        check_budget("a job", memory=2**40, work=1e30, advice="make it smaller")
    assert isinstance(info.value, ValueError) and isinstance(info.value, MemoryError)
    message = str(info.value)
    assert "a job would take about 1 TB of memory" in message and "and about 1e+30 operations" in message
    assert "make it smaller" in message and "docs/reliability.md" in message


@pytest.mark.parametrize("n, text", [(512, "512 bytes"), (3 * 2**20, "3 MB"), (1.5 * 2**30, "1.5 GB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


# --- the same from the command line -------------------------------------------------------------------------


def test_cli_segment_radius_too_large_is_one_line(tmp_path, cli, image_tif, points_csv):
    status, _, err = cli("segment", image_tif, "--points", points_csv, "--radius", "1e4", "--out", tmp_path / "l.tif")
    assert_one_line_failure(status, err, "radius must satisfy", "got 10000", command="ivote segment")
    assert not (tmp_path / "l.tif").exists()


def test_cli_detect_work_limit_is_one_line(tmp_path, cli, image_tif, monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_WORK", "1000")
    status, _, err = cli("detect", image_tif, "--radius", 4, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "above the limit of 1e+03 (IVOTE_MAX_WORK)", command="ivote detect")


def test_cli_bad_limit_variable_is_one_line(tmp_path, cli, image_tif, monkeypatch):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "plenty")
    status, _, err = cli("detect", image_tif, "--radius", 4, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "IVOTE_MAX_MEMORY", "'plenty'")


# --- the GPU out-of-memory guard's logic, without a GPU (the real thing: tests/gpu/test_rel_gpu.py) ---------------


class _FakeOutOfMemory(Exception):
    pass


@pytest.fixture
def fake_gpu(monkeypatch):
    """The guard sees _FakeOutOfMemory as the GPU running out of memory; records frees."""
    from ivote import _backend

    frees = []
    monkeypatch.setattr(_backend, "is_gpu_out_of_memory", lambda exc: isinstance(exc, _FakeOutOfMemory))
    monkeypatch.setattr(_backend, "free_gpu_memory", lambda: frees.append(True))
    return frees


def test_gpu_out_of_memory_becomes_a_limit_error_after_freeing(fake_gpu):
    from ivote._backend import gpu_memory_guard

    @gpu_memory_guard("a stage")
    def stage():
        raise _FakeOutOfMemory("Out of memory allocating 1,073,741,824 bytes")

    with pytest.raises(ResourceLimitError, match=r"a stage: the GPU ran out of memory \(Out of memory allocating "
                                                 r"1,073,741,824 bytes\); .*IVOTE_BACKEND=numpy") as info:
        stage()
    assert fake_gpu == [True]
    assert info.value.__context__ is None  # the failed call's frames (and GPU arrays) are not kept alive


@pytest.mark.parametrize("exception", [MemoryError("host"), ValueError("bad"), ResourceLimitError("limit")])
def test_other_failures_pass_the_gpu_guard_unchanged(fake_gpu, exception):
    from ivote._backend import gpu_memory_guard

    @gpu_memory_guard("a stage")
    def stage():
        raise exception

    with pytest.raises(type(exception)) as info:
        stage()
    assert info.value is exception and fake_gpu == []


def test_no_gpu_means_no_gpu_out_of_memory():
    from ivote._backend import cupy_available, is_gpu_out_of_memory

    if cupy_available():
        pytest.skip("this machine has a GPU")
    assert not is_gpu_out_of_memory(MemoryError("out of memory"))


# --- a TIFF header declaring more pixels than memory holds ---------------------------------------------------------


def _huge_header_tiff(path, side=1_000_000):
    """A valid 16x16 TIFF whose header then claims side x side uint16 pixels (1.8 TB)."""
    import struct

    import tifffile

    tifffile.imwrite(path, np.zeros((16, 16), np.uint16))
    with tifffile.TiffFile(path) as tif:
        tags = tif.pages[0].tags
        offsets = [tags[name].valueoffset for name in ("ImageWidth", "ImageLength", "RowsPerStrip")]
    data = bytearray(path.read_bytes())
    for offset in offsets:
        data[offset : offset + 4] = struct.pack("<I", side)
    path.write_bytes(bytes(data))
    return path


def test_a_tiff_declaring_terabytes_is_refused_before_reading(tmp_path, monkeypatch):
    from ivote.io import read_image

    monkeypatch.setenv("IVOTE_MAX_MEMORY", "1G")
    path = _huge_header_tiff(tmp_path / "huge.tif")
    with pytest.raises(ResourceLimitError, match=rf"reading {path} \(1000000x1000000 uint16 pixels\) would take "
                                                 r"about 1\.82 TB of memory, above the limit of 1 GB"):
        read_image(path)


def test_cli_tiff_declaring_terabytes_is_one_line(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("IVOTE_MAX_MEMORY", "1G")
    path = _huge_header_tiff(tmp_path / "huge.tif")
    status, _, err = cli("detect", path, "--radius", 4, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, "1.82 TB of memory", "check that the file is not damaged",
                            command="ivote detect")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("shape, radius", [((384, 384), 8.0), ((40, 40, 40), 5.0)])
def test_the_memory_estimate_covers_what_a_cpu_detection_allocates(backend, shape, radius):
    """The host memory ``_check_work`` refuses on is at least what the detection's arrays take
    (NumPy's allocations, traced; the Numba kernels' small scratch arrays are not)."""
    import tracemalloc

    from ivote.data import synthetic_nuclei
    from ivote.detect._settings import cpu_detection_memory

    image = synthetic_nuclei(shape, radius=radius / 1.5, seed=3).image
    iterative_voting(image, radius=radius, backend=backend)  # compiled, tables built
    tracemalloc.start()
    try:
        iterative_voting(image, radius=radius, backend=backend)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = cpu_detection_memory(image.size, backend)
    assert cpu_detection_memory(image.size, backend) - cpu_detection_memory(0, backend) < 4 * peak <= 4 * estimate
