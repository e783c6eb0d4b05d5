"""The cone schedule (``_plan.cone_angles``): each pass narrower, the last under one pixel wide."""

import math

import pytest

from ivote.detect._plan import cone_angles, make_plan

CASES = [  # radius (physical), spacing
    (3.0, (1.0, 1.0)),
    (6.0, (1.0, 1.0)),
    (12.0, (1.0, 1.0)),
    (12.0, (0.5, 0.5)),
    (40.0, (1.0, 1.0)),
    (8.0, (1.0, 1.0, 1.0)),
    (5.0, (2.0, 1.0, 1.0)),
    (4.0, (1.0, 0.3, 0.3)),
]


@pytest.mark.parametrize("radius, spacing", CASES)
@pytest.mark.parametrize("narrowing", [2.0, 3.0, 4.0])
def test_each_cone_is_narrower_and_only_the_last_is_under_one_pixel(radius, spacing, narrowing):
    radius_px = radius / min(spacing)
    angles = cone_angles(radius_px, narrowing=narrowing)
    assert angles[0] == pytest.approx(math.pi / 2)
    for wider, narrower in zip(angles, angles[1:]):
        assert narrower == pytest.approx(wider / narrowing)
    # r tan(phi), about the cone's width at the radius (2 r tan(phi/2)) in pixels of the finest axis:
    # at least one pixel until the last pass
    widths = [radius_px * math.tan(phi) for phi in angles]
    assert widths[-1] < 1.0
    assert all(width >= 1.0 for width in widths[:-1])


@pytest.mark.parametrize("radius, spacing", CASES)
def test_the_plan_votes_with_the_halving_schedule(radius, spacing):
    plan = make_plan(radius, spacing, len(spacing))
    assert plan.cone_angles == cone_angles(radius / min(spacing))
    assert plan.n_passes == len(plan.cone_angles)
    assert [float(c) for c in plan.cos_half32] == pytest.approx([math.cos(phi / 2) for phi in plan.cone_angles])
    assert all(b == pytest.approx(a / 2) for a, b in zip(plan.cone_angles, plan.cone_angles[1:]))


def test_a_narrower_first_cone_halves_from_there():
    angles = cone_angles(12.0, first=math.pi / 4)
    assert angles[0] == pytest.approx(math.pi / 4) and angles == pytest.approx(cone_angles(12.0)[1:])


@pytest.mark.parametrize("narrowing", [1.0, 0.5, -2.0])
def test_a_cone_that_does_not_narrow_is_refused(narrowing):
    with pytest.raises(ValueError, match="narrowing"):
        cone_angles(12.0, narrowing=narrowing)


def test_plans_take_the_module_schedule(monkeypatch):
    """benchmarks/studies/cone_schedule.py measures other schedules by replacing ``_plan.cone_angles``."""
    from ivote.detect import _plan

    faster = cone_angles(12.0, narrowing=3.0)
    monkeypatch.setattr(_plan, "cone_angles", lambda radius_px: cone_angles(radius_px, narrowing=3.0))
    _plan._make_plan.cache_clear()
    try:
        plan = make_plan(12.0, (1.0, 1.0), 2)
        assert plan.cone_angles == faster and plan.n_passes == len(faster) < len(cone_angles(12.0))
    finally:
        _plan._make_plan.cache_clear()  # no plan of this schedule outlives the test
