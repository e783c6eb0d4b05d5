"""Host-side logic of the GPU detection (``detect/_cuda.py``), checked on the CPU."""

import numpy as np
import pytest

from ivote.detect import _cuda, _cuda_cells, _cuda_kernels, _cuda_tables, _reference
from ivote.detect._contrast import BUMP_DEPTH, BUMP_SHARE, bump_ring, noise_positions
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
    numerators = flat * 0.5  # any value that follows its maximum
    rows = np.stack([flat[shuffled], votes.ravel()[flat[shuffled]]], axis=1).astype(np.uint32)  # as the kernels list
    got = _cuda._order_cells(rows, pairs[rng.permutation(len(pairs))].astype(np.uint32), numerators[shuffled])
    expected = _reference.sorted_close_pairs(votes, flat, plan)
    assert len(expected[2]) > 50
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[3], expected[0] * 0.5)  # the numerators moved with their maxima


def test_order_cells_without_pairs():
    rows = np.array([[5, 1], [2, 3], [9, 3]], dtype=np.uint32)
    flat, values, pairs, numerators = _cuda._order_cells(rows, np.zeros((0, 4), np.uint32))
    assert flat.tolist() == [2, 9, 5] and values.tolist() == [3, 3, 1] and pairs.shape == (0, 2) and numerators is None
    assert flat.dtype == values.dtype == np.int64
    *_, numerators = _cuda._order_cells(rows, np.zeros((0, 4), np.uint32), np.array([0.5, 0.2, 0.9]))
    assert numerators.tolist() == [0.2, 0.9, 0.5]
    big = np.array([[2**32 - 1, 2**32 - 1], [0, 2**32 - 1], [7, 0]], dtype=np.uint32)  # the extremes of both fields
    flat, values, _, _ = _cuda._order_cells(big, np.zeros((0, 4), np.uint32))
    assert flat.tolist() == [0, 2**32 - 1, 7] and values.tolist() == [2**32 - 1, 2**32 - 1, 0]


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
    from ivote.detect import _cells

    rng = np.random.default_rng(seed)
    n = 300
    better = rng.integers(0, n - 1, size=200)
    worse = better + rng.integers(1, 30, size=200)
    pairs = np.unique(np.stack([better, np.minimum(worse, n - 1)], axis=1), axis=0)
    pairs = pairs[pairs[:, 0] < pairs[:, 1]]
    loop = _cells._greedy_keep(n, pairs)
    monkeypatch.setattr(_cells, "_FEW_PAIRS", 0)
    rounds = _cells._greedy_keep(n, pairs)
    assert np.array_equal(loop, rounds) and 0 < loop.sum() < n


# ---------------------------------------------------------------------------
# Result lists, caches and pinned copies (NumPy stands in for CuPy)
# ---------------------------------------------------------------------------


class _FakeStream:
    def __init__(self, log):
        self.log = log

    def synchronize(self):
        self.log.append("synchronize")


class _FakeCuda:
    """The bits of ``cupy.cuda`` the host code touches, recording what it does."""

    def __init__(self):
        self.log, self.pinned_sizes = [], []

    def Device(self):  # noqa: N802 (cupy's name)
        class _Device:
            id = 0

        return _Device()

    def get_current_stream(self):
        return _FakeStream(self.log)

    def alloc_pinned_memory(self, nbytes):
        self.pinned_sizes.append(nbytes)
        return bytearray(nbytes)


class _FakeXp:
    def __init__(self):
        self.cuda = _FakeCuda()

    def asarray(self, array):
        self.cuda.log.append("asarray")
        return np.asarray(array)


@pytest.mark.parametrize("shape", [(600, 600), (1000, 1000), (97, 101, 103)])
@pytest.mark.parametrize("last", [None, (3, 5), (4000, 9001)])
def test_pairs_list_starts_16_byte_aligned(shape, last, monkeypatch):
    """ivote_close_pairs stores uint4 rows: the pairs must start 16 bytes into the
    buffer's (aligned) base whatever the maxima capacity, e.g. size // 64 odd
    (600 x 600: 5625) on a first detection."""
    plan = make_plan(8.0, (1.0,) * len(shape), len(shape))
    monkeypatch.setattr(_cuda_cells, "_last_counts", {} if last is None else {(shape, plan.radius, plan.spacing): last})
    results, maxima, pairs, numerators, residuals = _cuda._results_buffer(shape, plan, np)
    assert (pairs.ctypes.data - results.ctypes.data) % 16 == 0
    assert (maxima.ctypes.data - results.ctypes.data) % 8 == 0 and maxima.shape[1] == 2 and pairs.shape[1] == 4
    end = results.ctypes.data + results.nbytes
    assert maxima.ctypes.data + maxima.nbytes == pairs.ctypes.data
    assert pairs.ctypes.data + pairs.nbytes == numerators.ctypes.data and len(numerators) == len(maxima)
    assert numerators.ctypes.data + numerators.nbytes == residuals.ctypes.data and residuals.ctypes.data + residuals.nbytes == end
    assert len(residuals) == len(noise_positions(shape)) > 1500 and numerators.dtype == residuals.dtype == np.float64
    assert np.all(results[: _cuda._N_SLOTS] == 0)


def test_blur_taps_survive_a_concurrent_clear(monkeypatch):
    """A second worker thread may clear the taps cache (it holds at most 64)
    between this thread's store and its return: the taps must still come back."""

    class ClearedByAnotherThread(dict):
        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            self.clear()

    monkeypatch.setattr(_cuda_tables, "_taps", ClearedByAnotherThread())
    taps = _cuda._taps_on_gpu(2.0, _FakeXp())
    np.testing.assert_array_equal(taps, _cuda.gaussian_taps(2.0))

    class ClearedAfterTheTest(dict):  # between a membership test and the lookup
        def __contains__(self, key):
            found = super().__contains__(key)
            self.clear()
            return found

    cached = ClearedAfterTheTest()
    dict.__setitem__(cached, (2.0, 0), taps)
    monkeypatch.setattr(_cuda_tables, "_taps", cached)
    assert _cuda._taps_on_gpu(2.0, _FakeXp()) is taps


def test_cached_gpu_arrays_are_complete_before_other_threads_see_them(monkeypatch):
    """Cached device arrays (cone tables, disc offsets, blur taps) are read by
    later detections, maybe on another thread's stream: the stream that built
    them is synchronised before they are published."""
    xp = _FakeXp()
    monkeypatch.setattr(_cuda_tables, "_cache", type(_cuda_tables._cache)())

    def build():
        xp.cuda.log.append("build")
        return np.zeros(4, dtype=np.int32)

    _cuda_tables._memoized(("test", 0), build, xp)
    assert xp.cuda.log == ["build", "synchronize"]
    _cuda_tables._memoized(("test", 0), build, xp)  # cached: no second build, no wait
    assert xp.cuda.log == ["build", "synchronize"]

    monkeypatch.setattr(_cuda_tables, "_taps", {})
    xp.cuda.log.clear()
    _cuda._taps_on_gpu(1.5, xp)
    assert xp.cuda.log == ["asarray", "synchronize"]


class _DeviceLike:
    """A NumPy array with CuPy's ``get(out=...)``."""

    def __init__(self, array):
        self.array = array
        self.nbytes, self.dtype, self.size, self.shape = array.nbytes, array.dtype, array.size, array.shape

    def get(self, out):
        out[...] = self.array


def test_pinned_copies_use_few_block_sizes():
    """CuPy's pinned pool keeps freed blocks per exact size; the results copy (sized
    from each detection's counts) must come in a few sizes, not one per count."""
    xp = _FakeXp()
    for n in range(1, 20000, 7):
        array = np.arange(n, dtype=np.uint64)
        host = _cuda_cells._to_pinned_host(_DeviceLike(array), xp)
        np.testing.assert_array_equal(host, array)
    assert len(set(xp.cuda.pinned_sizes)) <= 7


def _emulated_cell_kernels(rng):
    """ivote_local_maxima and ivote_close_pairs in NumPy, with the kernels'
    counters and capacities, listing in a random (atomic) order."""
    from scipy import ndimage

    from ivote.detect._cone_tables import unpack_offsets

    def local_maxima(grid, block, args):
        votes, Z, Y, X, hz, hy, hx, is_maximum, n_maxima, maxima, capacity = args
        size = tuple(2 * int(h) + 1 for h in (hz, hy, hx))[3 - votes.ndim:]
        largest = ndimage.maximum_filter(votes, size=size, mode="constant", cval=0)
        for t in rng.permutation(np.flatnonzero((votes == largest) & (votes > 0))):
            is_maximum[t] = 1
            slot = int(n_maxima[0])
            n_maxima[0] += 1
            if slot < capacity:
                maxima[slot] = (t, votes.ravel()[t])

    def close_pairs(grid, block, args):
        maxima, n_maxima, capacity, is_maximum, votes, Z, Y, X, offsets, n_offsets, n_pairs, pairs, pair_capacity = args
        shape = votes.shape
        for j in rng.permutation(min(int(n_maxima[0]), int(capacity))):
            t, vt = int(maxima[j, 0]), int(maxima[j, 1])
            here = np.array(np.unravel_index(t, shape))
            for offset in unpack_offsets(offsets, votes.ndim):
                q = here + offset
                if np.any(q < 0) or np.any(q >= shape):
                    continue
                q = int(np.ravel_multi_index(tuple(q), shape))
                vq = int(votes.ravel()[q])
                if is_maximum[q] and (vq > vt or (vq == vt and q < t)):
                    slot = int(n_pairs[0])
                    n_pairs[0] += 1
                    if slot < pair_capacity:
                        pairs[slot] = (q, vq, t, vt)

    def contrast(grid, block, args):
        from ivote.detect._contrast import contrast_numerators

        s, _, Y, X, _, wy, wx, sign, ring, n_ring, part, whole, depth, maxima, n_maxima, capacity, numerators = args
        assert (int(part), int(whole), float(depth)) == (*BUMP_SHARE, BUMP_DEPTH) and int(n_ring) == len(ring)
        for j in range(min(int(n_maxima[0]), int(capacity))):
            point = np.array([divmod(int(maxima[j, 0]), int(X))])
            numerators[j] = contrast_numerators(s.astype(np.float32), point, (int(wy), int(wx)), float(sign),
                                                unpack_offsets(ring, 2))[0]

    return {"ivote_local_maxima": local_maxima, "ivote_close_pairs": close_pairs, "ivote_contrast<double>": contrast}


@pytest.mark.parametrize("capacity, pair_capacity", [(2, 1), (2, 10**4), (10**4, 3), (10**4, 10**4)])
def test_overflowing_lists_are_found_again_whole(capacity, pair_capacity, monkeypatch):
    """Counts above the lists' capacities: fetch re-runs the kernels with room
    for all, and the cells are the reference's (any capacity, any order)."""
    from ivote.detect._cone_tables import pack_offsets

    rng = np.random.default_rng(3)
    votes = np.zeros((48, 48), dtype=np.uint32)
    votes[tuple(rng.integers(0, 48, size=(2, 120)))] = rng.integers(1, 4, size=120)
    plan = make_plan(6.5, (1.0, 1.0), 2)
    monkeypatch.setattr(_cuda_cells, "_ball", lambda plan, xp: pack_offsets(plan.offsets))
    monkeypatch.setattr(_cuda_cells, "_ring", lambda plan, xp: pack_offsets(bump_ring(plan)))
    stats = np.zeros(_cuda._N_SLOTS, dtype=np.uint64)
    smoothed = rng.random(votes.shape)
    cells = _cuda._Cells(votes, plan, stats, _emulated_cell_kernels(rng), np, smoothed=smoothed, sign=-1.0)
    cells.find_maxima(capacity)
    cells.find_contrast()
    cells.find_pairs(pair_capacity)
    got = _cuda._order_cells(*cells.fetch(stats.copy()))

    from scipy import ndimage

    size = tuple(2 * h + 1 for h in plan.maxima_half_width)
    largest = ndimage.maximum_filter(votes, size=size, mode="constant", cval=0)
    expected = _reference.sorted_close_pairs(votes, np.flatnonzero((votes == largest) & (votes > 0)), plan)
    assert len(expected[0]) > 20 and len(expected[2]) > 10
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    from ivote.detect._contrast import contrast_numerators  # the contrasts follow the maxima found again

    points = np.stack(np.unravel_index(expected[0], votes.shape), axis=1)
    expected_numerators = contrast_numerators(smoothed.astype(np.float32), points, plan.window, -1.0, bump_ring(plan))
    np.testing.assert_array_equal(got[3], expected_numerators)


@pytest.mark.parametrize(
    "ndim, spacing, radius",
    [(2, (1.0, 1.0), 1.0), (2, (1.0, 1.0), 9.1), (2, (1.3, 1.3), 9.1), (3, (2.6, 1.3, 1.3), 9.1), (3, (1.0,) * 3, 0.5)],
)
def test_reach_is_the_largest_table_offset(ndim, spacing, radius):
    """Voters this far from every border run without bounds tests: the reach must
    cover every offset of every cone table (floor(r / s) + 1 when r / s is just
    under a whole number), and a radius of at most one pixel, with no offsets
    (no votes, no cells, as on NumPy), has reach 0."""
    from ivote.detect._cone_tables import cone_tables, unpack_offsets

    plan = make_plan(radius, spacing, ndim)
    reach = _cuda._reach(plan)
    assert len(reach) == 3 and reach[: 3 - ndim] == (0,) * (3 - ndim)
    largest = np.zeros(ndim, dtype=np.int64)
    for table in cone_tables(plan, np):
        if len(table.entries):
            largest = np.maximum(largest, np.abs(unpack_offsets(table.entries, ndim)).max(axis=0))
    assert tuple(largest) == reach[3 - ndim:]
    assert reach[3 - ndim:] == tuple(np.abs(plan.offsets).max(axis=0, initial=0))


# ---------------------------------------------------------------------------
# The CUDA graph of repeated detections (NumPy and recording kernels stand in)
# ---------------------------------------------------------------------------


class _RecordingKernels(dict):
    """Any kernel name gives a kernel that records its arguments (and whether a capture was on)."""

    def __init__(self, cuda):
        super().__init__()
        self.cuda, self.calls = cuda, []

    def __missing__(self, name):
        calls, cuda = self.calls, self.cuda

        class Kernel:
            max_dynamic_shared_size_bytes = 1 << 20

            def __call__(self, grid, block, args, shared_mem=0):
                calls.append((name, args, cuda.capturing))

        self[name] = kernel = Kernel()
        return kernel


class _GraphCuda(_FakeCuda):
    def __init__(self):
        super().__init__()
        self.capturing = False
        cuda = self

        class Stream:
            def __init__(self, non_blocking=False):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def begin_capture(self):
                cuda.capturing = True

            def end_capture(self):
                cuda.capturing = False
                return type("Graph", (), {"launch": lambda self: cuda.log.append("launch")})()

            def synchronize(self):
                cuda.log.append("synchronize")

        self.Stream = Stream

    def Device(self, device=None):  # noqa: N802 (cupy's name)
        return type("Device", (), {"id": 0, "attributes": {"MaxSharedMemoryPerBlockOptin": 48 * 1024}})()

    def get_current_stream(self):
        log, cuda = self.log, self

        class Current(_FakeStream):
            def synchronize(self):
                log.append("synchronize during capture" if cuda.capturing else "synchronize")

        return Current(log)


class _GraphXp(_FakeXp):
    def __init__(self):
        self.cuda = _GraphCuda()

    def asarray(self, array):
        self.cuda.log.append("asarray during capture" if self.cuda.capturing else "asarray")
        return np.array(array)  # a copy, as on the GPU

    def __getattr__(self, name):
        return getattr(np, name)


def _held_arrays(obj, skip, seen=None) -> list:
    """Every NumPy array reachable from ``obj``'s attributes, tuples, lists and dicts (not through ``skip``)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, skip):
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, (tuple, list)):
        children = obj
    elif isinstance(obj, dict):
        children = obj.values()
    elif hasattr(obj, "__dict__"):
        children = vars(obj).values()
    else:
        return []
    return [array for child in children for array in _held_arrays(child, skip, seen)]


@pytest.mark.parametrize("shape, sigma", [((64, 80), (2.0, 2.0)), ((64, 80), None), ((12, 40, 44), (1.0, 2.0, 2.0))])
def test_graph_reads_only_arrays_it_holds(shape, sigma, monkeypatch):
    """Every array a captured kernel reads (and the launches before the graph read)
    must be held by the _Graphed, however the caches change meanwhile: here each
    cache lookup during the capture or a detection returns a new object, as when
    another thread evicted and rebuilt the entry. The capture must also do no
    lookup at all (a rebuild there would allocate and synchronise)."""
    from collections import OrderedDict

    xp = _GraphXp()
    plan = make_plan(6.0, (1.0,) * len(shape), len(shape))
    kernels = _RecordingKernels(xp.cuda)
    monkeypatch.setattr(_cuda_kernels, "_functions", {(plan.ndim, "int", 0): kernels})
    monkeypatch.setattr(_cuda_tables, "_cache", OrderedDict())
    monkeypatch.setattr(_cuda_tables, "_taps", {})
    monkeypatch.setattr(_cuda_tables, "_halos", {})
    monkeypatch.setattr(_cuda_tables, "_shared_limits", {})
    monkeypatch.setattr(_cuda_cells, "_last_counts", {})
    monkeypatch.setattr(_cuda_cells, "_to_pinned_host", lambda array, xp: array.copy())
    rebuilt = [False]
    memoized = _cuda_tables._memoized
    monkeypatch.setattr(_cuda_tables, "_memoized", lambda key, build, xp: build() if rebuilt[0] else memoized(key, build, xp))
    original_init = _cuda._Graphed.__init__

    def init(self, *args):
        original_capture = xp.cuda.Stream.begin_capture

        def begin_capture(stream):
            rebuilt[0] = True  # from here on, every lookup gives a new object
            original_capture(stream)

        monkeypatch.setattr(xp.cuda.Stream, "begin_capture", begin_capture)
        original_init(self, *args)

    monkeypatch.setattr(_cuda._Graphed, "__init__", init)
    key = (shape, plan.radius, plan.spacing, plan.ndim, 1.0, sigma, 0)
    graphed = _cuda._Graphed(key, plan, xp)
    assert not [entry for entry in xp.cuda.log if "during capture" in entry]
    image = np.random.default_rng(1).random(shape)
    graphed.detect(image)
    assert "launch" in xp.cuda.log
    held = _held_arrays(graphed, skip=(_RecordingKernels, _GraphXp))
    captured = [call for call in kernels.calls if call[2]]
    assert {name for name, *_ in captured} >= {"ivote_voters", "ivote_local_maxima", "ivote_close_pairs"}
    for name, args, _ in kernels.calls:
        for arg in args:
            if isinstance(arg, np.ndarray) and arg.ndim and arg is not image and not np.shares_memory(arg, image):
                assert any(np.may_share_memory(arg, array) for array in held), f"{name} reads an array the graph does not hold"
