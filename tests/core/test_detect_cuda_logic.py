"""Host-side logic of the GPU detection (``detect/_cuda.py``), checked on the CPU."""

import numpy as np
import pytest

from ivote.detect import _cuda, _reference
from ivote.detect._plan import make_plan


def _kernel_pairs(votes, flat, plan):
    """The pairs ``ivote_close_pairs`` emits, (q, vote of q, t, vote of t): for every
    maximum t, each maximum q in its disc/ball with a larger vote, or the same
    vote and a lower flat index."""
    shape = np.array(votes.shape)
    coords = np.stack(np.unravel_index(flat, votes.shape), axis=1)
    is_maximum = np.zeros(votes.size, dtype=bool)
    is_maximum[flat] = True
    pairs = []
    for offset in plan.offsets:
        q = coords + offset
        inside = np.all((q >= 0) & (q < shape), axis=1)
        q_flat = np.ravel_multi_index(tuple(q[inside].T), votes.shape)
        t_flat = flat[inside]
        vq, vt = votes.ravel()[q_flat], votes.ravel()[t_flat]
        better = is_maximum[q_flat] & ((vq > vt) | ((vq == vt) & (q_flat < t_flat)))
        pairs.append(np.stack([q_flat[better], vq[better], t_flat[better], vt[better]], axis=1).astype(np.int64))
    return np.concatenate(pairs)


@pytest.mark.parametrize("ndim", [2, 3])
def test_cells_in_any_order_sort_as_the_reference(ndim):
    """Maxima and pairs arrive in atomic (any) order; sorted they are the reference's."""
    rng = np.random.default_rng(10 + ndim)
    votes = np.zeros((40,) * ndim, dtype=np.uint32)
    n = 250 * ndim
    votes[tuple(rng.integers(0, 40, size=(ndim, n)))] = rng.integers(1, 4, size=n)  # many ties
    plan = make_plan(6.5, (1.0, 1.0) if ndim == 2 else (2.0, 1.0, 1.0), ndim)
    flat = np.flatnonzero(votes)
    pairs = _kernel_pairs(votes, flat, plan)
    shuffled = rng.permutation(len(flat))
    got = _cuda._order_cells(flat[shuffled], votes.ravel()[flat[shuffled]].astype(np.int64),
                             pairs[rng.permutation(len(pairs))])
    expected = _reference.sorted_close_pairs(votes, flat, plan)
    assert len(expected[2]) > 50
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_order_cells_without_pairs():
    flat, values, pairs = _cuda._order_cells(np.array([5, 2, 9]), np.array([1, 3, 3]), np.zeros((0, 4), np.int64))
    assert flat.tolist() == [2, 9, 5] and values.tolist() == [3, 3, 1] and pairs.shape == (0, 2)


def test_statistic_keys_round_trip():
    """The ordered integer keys of doubles (ivote_key in ivote.cu) decode on the host."""
    values = np.array([-1e300, -3.5, -0.0, 0.0, 1e-300, 2.5, 7.0])
    bits = values.view(np.uint64)
    keys = np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))
    assert np.all(np.diff(keys.astype(object)) >= 0)  # same order as the values
    assert [_cuda._from_key(k) for k in keys] == values.tolist()
    assert np.isnan(_cuda._from_key(0))  # no finite value seen


def test_blur_taps_are_cupyx_gaussian():
    """The taps of cupyx.scipy.ndimage.gaussian_filter (radius int(4 sigma + 0.5), normalised)."""
    taps = _cuda.gaussian_taps(2.0)
    assert len(taps) == 17 and taps.sum() == pytest.approx(1.0) and np.array_equal(taps, taps[::-1])
    assert _cuda.gaussian_taps(0.1) is None and _cuda.gaussian_taps(0.0) is None
    x = np.arange(-8, 9)
    expected = np.exp(-0.5 / 4.0 * x**2)
    np.testing.assert_array_equal(taps, expected / expected.sum())


@pytest.mark.parametrize("ndim, spacing, radius", [(2, (1.0, 1.0), 12.0), (2, (1.3, 1.3), 9.1), (3, (2.6, 1.3, 1.3), 9.1)])
def test_cone_limits_are_the_reference_thresholds(ndim, spacing, radius):
    """The kernels compare dot(o, a) with limit * |a|; limit must be the reference's
    (cos_half * offset_norms[k]) bit for bit, for every entry of every table."""
    from ivote.detect._cone_tables import cone_tables, pack_offsets

    plan = make_plan(radius, spacing, ndim)
    packed = pack_offsets(plan.offsets)
    index = {int(p): k for k, p in enumerate(packed)}
    for table, cos_half in zip(cone_tables(plan, np), plan.cos_half32):
        limits = _cuda.cone_limits(plan, table.entries, cos_half)
        k = np.array([index[int(p)] for p in table.entries])
        expected = cos_half * plan.offset_norms[k]
        assert limits.dtype == np.float32 and np.array_equal(limits.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("ndim, spacing", [(2, (1.3, 1.3)), (3, (2.6, 1.3, 1.3))])
def test_dense_cone_test_matches_the_reference(ndim, spacing):
    """The kernels' cone test (2D without the z terms; limits from the table) on
    every entry against random int16 directions: the reference's decisions."""
    from ivote.detect._cone_tables import cone_tables, direction_bins, unpack_offsets
    from ivote.detect._plan import _sum_in_order

    plan = make_plan(9.1, spacing, ndim)
    rng = np.random.default_rng(ndim)
    directions = rng.integers(-32767, 32768, size=(400, ndim)).astype(np.int16)
    a = directions.astype(np.float32)
    norm_a = np.sqrt(_sum_in_order([a[:, i] * a[:, i] for i in range(ndim)]))
    s32 = plan.spacing32
    for table, cos_half in zip(cone_tables(plan, np), plan.cos_half32):
        limits = _cuda.cone_limits(plan, table.entries, cos_half)
        offsets = unpack_offsets(table.entries, ndim)
        bins = direction_bins(directions, table.cells, ndim)
        for j in range(0, 400, 7):
            e = slice(table.starts[bins[j]], table.starts[bins[j] + 1])
            o = offsets[e].astype(np.float32) * s32
            dot = _sum_in_order([o[:, i] * a[j, i] for i in range(ndim)])
            kernel = dot >= limits[e] * norm_a[j]
            length = np.sqrt(_sum_in_order([o[:, i] * o[:, i] for i in range(ndim)]))
            reference = dot >= (cos_half * length) * norm_a[j]
            assert np.array_equal(kernel, reference)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_scan_over_few_pairs_equals_the_rounds(seed, monkeypatch):
    """_greedy_keep: the loop over few pairs and the vectorised rounds agree."""
    from ivote.detect import _voting

    rng = np.random.default_rng(seed)
    n = 300
    better = rng.integers(0, n - 1, size=200)
    worse = better + rng.integers(1, 30, size=200)
    pairs = np.unique(np.stack([better, np.minimum(worse, n - 1)], axis=1), axis=0)
    pairs = pairs[pairs[:, 0] < pairs[:, 1]]
    loop = _voting._greedy_keep(n, pairs)
    monkeypatch.setattr(_voting, "_FEW_PAIRS", 0)
    rounds = _voting._greedy_keep(n, pairs)
    assert np.array_equal(loop, rounds) and 0 < loop.sum() < n
