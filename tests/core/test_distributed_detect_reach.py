"""Block detection runs only the voters each pass needs (ivote.detect._reach), and stays exact."""

import numpy as np
import pytest

pytest.importorskip("dask")

from ivote import iterative_voting  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.detect import _cpu, _reach  # noqa: E402
from ivote.detect._plan import make_plan  # noqa: E402
from ivote.distributed import detect_chunked, detection_halo  # noqa: E402

RADIUS = 4


@pytest.fixture(scope="module")
def image_2d():
    image, *_ = synthetic_nuclei((150, 150), radius=RADIUS, seed=3)
    image = image.copy()
    image[:, 100:] *= 0.4  # a block's own statistics are not the image's
    return image


def _same(a, b) -> bool:
    return (np.array_equal(a.candidates, b.candidates) and np.array_equal(a.candidate_scores, b.candidate_scores)
            and np.array_equal(a.points, b.points))


def test_pass_boxes_shrink_by_two_reaches_and_fit_the_halo():
    plan = make_plan(RADIUS, (1.0, 1.0), 2)
    halo = detection_halo(plan, (2.0, 2.0))
    boxes = _reach.pass_boxes(plan, (300, 300), ((100, 150), (100, 150)))
    reach = _reach.pass_reach(plan)
    assert len(boxes) == plan.n_passes > 2
    for k, box in enumerate(boxes):
        margin = _reach.pass_margin(plan, k)
        assert box == tuple((100 - m, 150 + m) for m in margin)
        assert all(m < h for m, h in zip(margin, halo))  # the halo also holds the blur and the gradient
        if k:
            assert [p - m for p, m in zip(_reach.pass_margin(plan, k - 1), margin)] == list(2 * reach)
    assert _reach.pass_margin(plan, plan.n_passes - 1) == [h + r for h, r in zip(plan.maxima_half_width, reach)]
    assert _reach.pass_boxes(plan, (300, 300), None) is None


def test_later_passes_run_fewer_voters(image_2d, monkeypatch):
    """The passes of a block drop the voters outside their box: fewer each pass."""
    counts = []
    original = _cpu._Voters

    def counting(voters, shape, plan):
        counts.append(len(voters))
        return original(voters, shape, plan)

    monkeypatch.setattr(_cpu, "_Voters", counting)
    detect_chunked(image_2d, RADIUS, chunks=40, scheduler="sync", backend="numpy")
    assert counts and any(later < earlier for earlier, later in zip(counts, counts[1:]))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_one_reach_less_per_pass_changes_cells(image_2d, backend, monkeypatch):
    """The boxes are not generous: dropping the voters one reach R nearer to the owned
    region than the boxes allow moves or loses cells at seams (the equality tests of
    tests/core/test_distributed_detect.py would fail)."""
    if backend == "numba":
        pytest.importorskip("numba")
        from ivote.detect import _numba

        monkeypatch.setattr(_numba, "DROP_VOTERS", True)  # off by default (see there): the path stays exact
    whole = iterative_voting(image_2d, radius=RADIUS, backend=backend)
    exact = detect_chunked(image_2d, RADIUS, chunks=37, scheduler="sync", backend=backend)
    assert _same(exact, whole)
    margin = _reach.pass_margin

    def short(plan, k):
        return [m - int(r) for m, r in zip(margin(plan, k), _reach.pass_reach(plan))]

    monkeypatch.setattr(_reach, "pass_margin", short)
    assert not _same(detect_chunked(image_2d, RADIUS, chunks=37, scheduler="sync", backend=backend), whole)


def _largest_by_blocks(image, chunks, backend):
    """The largest normalised gradient as the block-by-block gradient pass computes it: every block whole."""
    from ivote.distributed import _detect_chunks, _detect_statistics

    shape = image.shape
    low, high = float(image.min()), float(image.max())
    sigma = (2.0,) * image.ndim
    reach = tuple(int(4 * s + 0.5) + 1 for s in sigma)
    spacing = (1.0,) * image.ndim
    values = []
    for owned in _detect_chunks._blocks(shape, chunks):
        region = _detect_chunks._grow(owned, reach, shape)
        values.append(_detect_statistics._gradient_task(image[region], owned, region, low, high, sigma, spacing,
                                                        backend, 0))
    return max(values), (low, high, reach, sigma, spacing)


@pytest.mark.parametrize("offset", [0.0, 1e5])
@pytest.mark.parametrize("candidates, tolerance", [(64, 1e-6), (1, 0.5)])
def test_one_read_statistics_give_the_largest_gradient_exactly(image_2d, offset, candidates, tolerance,
                                                                monkeypatch):
    """The first pass's raw candidates give the normalised image's largest gradient bit for bit,
    also far from zero (values 1e5 + the image) and when a block's band holds more voxels than it
    reports (then it is evaluated whole)."""
    from ivote.distributed import _detect_chunks, _detect_statistics

    image = image_2d + offset
    chunks = (50, 75)
    expected, (low, high, reach, sigma, spacing) = _largest_by_blocks(image, chunks, "numpy")
    monkeypatch.setattr(_detect_statistics, "_GRADIENT_CANDIDATES", candidates)
    monkeypatch.setattr(_detect_statistics, "_GRADIENT_TOLERANCE", tolerance)
    whole_blocks = []
    original = _detect_statistics._gradient_task

    def counting(source, owned, region, *args):
        whole_blocks.append(all(o.stop - o.start > 1 for o in owned))
        return original(source, owned, region, *args)

    monkeypatch.setattr(_detect_statistics, "_gradient_task", counting)
    blocks = _detect_chunks._blocks(image.shape, chunks)
    regions = [_detect_chunks._grow(o, reach, image.shape) for o in blocks]
    found = [_detect_statistics._statistics_task(image[region], o, region, np.zeros((0, 2), np.int64), reach,
                                                 sigma, spacing, "numpy", 0, False)
             for o, region in zip(blocks, regions)]
    got = _detect_statistics._largest_gradient(found, blocks, image, image.shape, low, high, reach, sigma, spacing,
                                               "numpy", 0, "sync")
    assert got == expected
    assert any(whole_blocks) == (candidates == 1)  # a band wider than what a block reports: the block whole
    whole = iterative_voting(image, radius=RADIUS, backend="numpy")
    assert _same(detect_chunked(image, RADIUS, chunks=chunks, scheduler="sync", backend="numpy"), whole)


@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_zarr_blocks_are_read_once_when_they_fit(image_2d, tmp_path, cache_bytes, monkeypatch):
    zarr = pytest.importorskip("zarr")
    from ivote.distributed import _tasks

    stored = zarr.open_array(str(tmp_path / "image.zarr"), mode="w", shape=image_2d.shape, chunks=(64, 64),
                             dtype=image_2d.dtype)
    stored[:] = image_2d
    reads = []
    original = _tasks._Lazy.read

    def counting(self):
        reads.append(self.region)
        return original(self)

    monkeypatch.setattr(_tasks._Lazy, "read", counting)
    chunked = detect_chunked(stored, RADIUS, chunks=(75, 75), scheduler="sync", backend="numpy",
                             cache_bytes=cache_bytes)
    assert _same(chunked, iterative_voting(image_2d, radius=RADIUS, backend="numpy"))
    big = [r for r in reads if all(s.stop - s.start > 1 for s in r) and all(s.stop - s.start >= 75 for s in r)]
    assert len(big) == (4 if cache_bytes is None else 8)  # 4 blocks, read once or twice
