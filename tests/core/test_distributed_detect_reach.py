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
    whole = iterative_voting(image_2d, radius=RADIUS, backend=backend)
    exact = detect_chunked(image_2d, RADIUS, chunks=37, scheduler="sync", backend=backend)
    assert _same(exact, whole)
    margin = _reach.pass_margin

    def short(plan, k):
        return [m - int(r) for m, r in zip(margin(plan, k), _reach.pass_reach(plan))]

    monkeypatch.setattr(_reach, "pass_margin", short)
    assert not _same(detect_chunked(image_2d, RADIUS, chunks=37, scheduler="sync", backend=backend), whole)
