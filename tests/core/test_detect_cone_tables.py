"""Cone tables of the GPU voting kernels, checked on the CPU: every offset of
every voter's exact cone is listed for its bin, in the reference's order."""

import numpy as np
import pytest

from ivote.data import synthetic_nuclei
from ivote.detect._cone_tables import cone_tables, direction_bins, pack_offsets, unpack_offsets
from ivote.detect._plan import DIRECTION_SCALE, make_plan
from ivote.detect._reference import _as_float32_axes, _in_cone, prepare_voters
from ivote.detect._settings import _DEFAULT_BLUR_PIXELS


def random_directions(ndim, n, seed):
    """int16 directions as the kernels hold them: random, axis-aligned, diagonal and on bin edges."""
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n, ndim))
    special = np.array(list(np.ndindex(*(3,) * ndim)), dtype=float) - 1  # axes, diagonals
    special = special[np.any(special != 0, axis=1)]
    edges = rng.normal(size=(n // 4, ndim))
    edges[:, 0] = np.abs(edges[:, 1:]).max(axis=1) * rng.choice([-1, 1], len(edges))  # two equal majors
    d = np.concatenate([d, special, edges])
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    return np.rint(d * DIRECTION_SCALE).astype(np.int16)


def assert_tables_cover(plan, directions):
    tables = cone_tables(plan, np)
    direction, norm = _as_float32_axes(directions)
    packed = pack_offsets(plan.offsets)
    position = {int(p): k for k, p in enumerate(packed)}
    for table, cos_half in zip(tables, plan.cos_half32):
        bins = direction_bins(directions, table.cells, plan.ndim)
        assert bins.min() >= 0 and bins.max() < table.n_bins
        listed = np.zeros((table.n_bins, len(plan.offsets)), dtype=bool)
        for b in range(table.n_bins):
            ks = [position[int(p)] for p in table.entries[table.starts[b]:table.starts[b + 1]]]
            assert ks == sorted(ks)  # lexicographic order: the turn step's tie-break
            listed[b, ks] = True
        for k in range(len(plan.offsets)):
            hit = _in_cone(plan, k, direction, norm, cos_half)
            missing = hit & ~listed[bins, k]
            assert not missing.any(), f"offset {plan.offsets[k]} missing for {directions[missing][:3]}"
        in_cone = sum(_in_cone(plan, k, direction, norm, cos_half).sum() for k in range(len(plan.offsets)))
        scanned = (table.starts[bins + 1] - table.starts[bins]).sum()
        assert scanned <= 6 * max(in_cone, len(directions))  # a small superset, not the whole ball


@pytest.mark.parametrize("ndim, radius, spacing", [(2, 7.0, (1.0, 1.0)), (2, 5.0, (1.0, 0.7)),
                                                   (3, 4.0, (1.0, 1.0, 1.0)), (3, 5.0, (2.0, 1.0, 1.0))])
def test_tables_cover_every_cone(ndim, radius, spacing):
    plan = make_plan(radius, spacing, ndim)
    assert_tables_cover(plan, random_directions(ndim, 400, seed=ndim))


def test_tables_cover_the_directions_of_a_real_run():
    sample = synthetic_nuclei((20, 48, 48), radius=5, spacing=(2.0, 1.0, 1.0), seed=3)
    plan = make_plan(5.0, sample.spacing, 3)
    from scipy import ndimage

    image = (sample.image - sample.image.min()) / np.ptp(sample.image)
    smoothed = ndimage.gaussian_filter(image, [_DEFAULT_BLUR_PIXELS / s for s in sample.spacing])
    _, _, directions = prepare_voters(smoothed, plan, 1.0)
    assert_tables_cover(plan, directions[:: max(1, len(directions) // 3000)])


def test_pack_round_trip():
    rng = np.random.default_rng(0)
    offsets2 = rng.integers(-30000, 30000, size=(100, 2))
    offsets3 = rng.integers(-511, 512, size=(100, 3))
    assert np.array_equal(unpack_offsets(pack_offsets(offsets2), 2), offsets2)
    assert np.array_equal(unpack_offsets(pack_offsets(offsets3), 3), offsets3)
    with pytest.raises(ValueError, match="radius must be at most 511"):
        pack_offsets(np.array([[0, 0, 600]]))


@pytest.mark.parametrize("ndim, spacing", [(2, (1.3, 1.3)), (3, (1.0, 1.3, 1.3)), (3, (2.6, 1.3, 1.3))])
def test_tiled_boxes_hold_every_offset(ndim, spacing):
    """radius / spacing just under 7 in float64, while offsets of 7 pass the float32 disc test:
    the tiled kernels' box must come from the offsets, not from floor(radius / spacing)."""
    from ivote.detect._cuda import _tiled_box

    plan = make_plan(9.1, spacing, ndim)
    assert np.abs(plan.offsets[:, -1]).max() == 7 == plan.window[-1]  # the case that broke the box
    tiled = 0
    for table in cone_tables(plan, np):
        halo = _tiled_box(plan, table, "int", max_bytes=1 << 20)
        if halo is None:
            continue
        tiled += 1
        reach = np.abs(unpack_offsets(table.entries, ndim)).max(axis=0)
        assert np.all(reach <= np.asarray(halo[3 - ndim:]))
    assert tiled >= 1


def test_offsets_beyond_the_packing_are_refused_before_any_work():
    from ivote.detect._cone_tables import check_packable

    with pytest.raises(ValueError, match="radius must be at most 32767"):
        check_packable(make_plan(4.0, (1.0, 1e-4), 2))
    # 3D: 520 pixels along one axis, one pixel along the others (a plan of thousands of offsets, not millions)
    for spacing in [(40.0, 40.0, 0.1), (0.1, 40.0, 40.0)]:
        with pytest.raises(ValueError, match="radius must be at most 511"):
            check_packable(make_plan(52.0, spacing, 3))
    with pytest.raises(ValueError, match="32767"):
        pack_offsets(np.array([[0, 40000]]))
    check_packable(make_plan(9.1, (1.3, 1.3), 2))  # ordinary radii pass


def _angles(a, b):
    """Angle (radians, float64) between the rows of two (N, ndim) direction arrays."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.arccos(np.clip(cos, -1.0, 1.0))


@pytest.mark.parametrize("ndim, radius, spacing", [(2, 12.0, (1.0, 1.0)), (2, 5.0, (1.0, 0.7)),
                                                   (3, 8.0, (1.0, 1.0, 1.0)), (3, 5.0, (2.0, 1.0, 1.0)),
                                                   (2, 2.0, (1.0, 1.0)), (2, 1.5, (1.0, 0.8)),
                                                   (3, 2.0, (2.0, 1.0, 1.0))])
def test_initial_directions_are_the_nearest_class_directions(ndim, radius, spacing):
    """The quantisation of the voters' initial directions: every direction becomes a class
    direction within the table's bound of it, and at most one bin's angular size (the cell
    diagonal in the face's tangent plane, sqrt(ndim - 1) / cells) worse than the nearest class
    direction found by brute force; the first class of equal directions; the axes stay the axes."""
    from ivote.detect._cone_tables import class_directions, initial_directions, quantise_directions

    plan = make_plan(radius, spacing, ndim)
    table = initial_directions(plan)
    classes = class_directions(plan)
    assert table.offset_of_bin.shape == (2 * ndim * table.cells ** (ndim - 1),)
    directions = random_directions(ndim, 3000, seed=10 + ndim)
    ks, quantised = quantise_directions(directions, plan)
    np.testing.assert_array_equal(quantised, classes[ks])
    got = _angles(directions, quantised)
    nearest = np.array([_angles(np.repeat(d[None], len(classes), 0), classes).min() for d in directions])
    bin_size = np.sqrt(ndim - 1) / table.cells
    assert np.all(got <= table.bound)
    assert np.all(got <= nearest + 2 * bin_size + 1e-6)
    assert table.bound <= nearest.max() + 2 * bin_size + 2e-3  # the bound is not loose either
    first = {}
    for k, d in enumerate(map(tuple, classes)):
        first.setdefault(d, k)
    assert all(first[tuple(classes[k])] == k for k in np.unique(table.offset_of_bin))
    axes = np.concatenate([np.eye(ndim), -np.eye(ndim)]) * DIRECTION_SCALE
    np.testing.assert_array_equal(quantise_directions(axes.astype(np.int16), plan)[1], axes.astype(np.int16))


@pytest.mark.parametrize("ndim, spacing", [(2, (1.0, 1.0)), (2, (1.0, 0.8)), (3, (2.0, 1.0, 1.0))])
def test_small_radii_start_from_a_larger_balls_directions(ndim, spacing):
    """Below ``INITIAL_RADIUS`` finest pixels the classes are the plan's offset directions (the
    turn's, classes 0..K-1) then those of the ball of that radius that the plan lacks, so the
    quantisation's bound is that radius's at every smaller one (2D radius 2 px alone: 8 offsets,
    22.6 degrees); from that radius on, the plan's own directions only."""
    from ivote.detect._cone_tables import INITIAL_RADIUS, class_directions, initial_directions

    finest = min(spacing)
    at = make_plan(INITIAL_RADIUS[ndim] * finest, spacing, ndim)
    for radius in (1.5 * finest, 2.0 * finest, 3.0 * finest, 0.99 * INITIAL_RADIUS[ndim] * finest):
        plan = make_plan(radius, spacing, ndim)
        classes = class_directions(plan)
        np.testing.assert_array_equal(classes[:len(plan.offsets)], plan.offset_directions)
        own = {tuple(d) for d in plan.offset_directions}
        extra = [tuple(d) for d in classes[len(plan.offsets):]]
        assert not own & set(extra) and len(set(extra)) == len(extra)
        assert extra or radius > 3 * finest  # the ball just under that radius may have no other direction
        assert own | set(extra) == own | {tuple(d) for d in at.offset_directions}
        assert initial_directions(plan).bound <= initial_directions(at).bound + 1e-9
    if len(set(spacing)) == 1:  # isotropic: 7.2 degrees in 2D, 6.4 in 3D (22.6 and 28.2 from the plan's own)
        assert initial_directions(make_plan(2.0 * finest, spacing, ndim)).bound < np.radians(8.0)
    for radius in (INITIAL_RADIUS[ndim] * finest, 12.0 * finest):
        plan = make_plan(radius, spacing, ndim)
        np.testing.assert_array_equal(class_directions(plan), plan.offset_directions)


def test_reference_voters_hold_quantised_gradient_directions():
    """``prepare_voters``: each voter's direction is the class direction that the table gives
    its gradient direction (computed here from ``np.gradient``), so always one of the classes'."""
    from ivote.detect._cone_tables import class_directions, quantise_directions

    sample = synthetic_nuclei((64, 60), radius=6, seed=4)
    plan = make_plan(6.0, (1.0, 1.0), 2)
    image = (sample.image - sample.image.min()) / np.ptp(sample.image)
    from scipy import ndimage

    smoothed = ndimage.gaussian_filter(image, 2.0)
    voters, _, directions = prepare_voters(smoothed, plan, -1.0)
    gy, gx = np.gradient(smoothed)
    gradient = -np.stack([gy.ravel()[voters], gx.ravel()[voters]], axis=1)
    own = np.rint(gradient / np.linalg.norm(gradient, axis=1, keepdims=True) * DIRECTION_SCALE).astype(np.int16)
    np.testing.assert_array_equal(directions, quantise_directions(own, plan)[1])
    known = {tuple(d) for d in class_directions(plan)}
    assert len(voters) > 500 and all(tuple(d) in known for d in directions)
