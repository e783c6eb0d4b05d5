"""Merge objects that are one nucleus split between two seeds (after the evolution).

Two touching objects are merged when their union is convex (solidity, union area over its
convex hull's area, at least ``min_solidity``) and no larger than the largest expected
nucleus: two true nuclei that overlap leave a concave neck, one nucleus seeded twice does not.

The label image stays where it is (NumPy or CuPy): the touching pairs, the sizes and the final
relabelling are array operations on its backend; only the few candidate pairs' union masks
come to the host for their convex hulls. On the GPU (3D) an exact lower bound on each pair's
hull voxels (:func:`_hull_count_lower_bound`, a few launches for all pairs) rejects first the
pairs that even it proves too concave, so qhull runs only for the rest; the decisions are those
of the full hulls, which the NumPy path computes for every pair.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .._backend import get_array_module, to_host

__all__ = ["merge_split_objects", "solidity", "max_volume_pixels"]


def _merge_kernels(index_type: str):
    """The merge's CUDA kernels (levelset.cu), one module: touching pairs and hull counts."""
    from .._backend import load_module

    names = {"pairs": f"ivote_levelset_touching_pairs<{index_type}>", "hulls": "ivote_levelset_hull_count",
             "masks": "ivote_levelset_pair_masks", "columns": "ivote_levelset_hull_columns",
             "round": "ivote_levelset_hull_round"}
    module = load_module("levelset", name_expressions=tuple(names.values()))
    return {key: module.get_function(name) for key, name in names.items()}


_MAX_PAIR_BITS = 1 << 31  # the GPU's bitmap of label pairs, n^2 bits, stays below 256 MB


_PAIR_BLOCKS = 1 << 16  # blocks of the touching-pairs kernel's grid-stride loop


def _int_loop_fits(total: int, stride: int) -> bool:
    """Whether a grid-stride loop ``for (int c = ...; c < total; c += stride)`` never overflows
    int32: its last index plus one stride stays below 2^31."""
    return total + stride <= 2**31


def _touching_pairs(labels, n=None) -> np.ndarray:
    """(P, 2) host array of the label pairs (a < b) that touch along an axis, sorted
    (``n``: the largest label, when known). On the GPU one pass sets a bit per pair."""
    xp = get_array_module(labels)
    n = int(labels.max()) if n is None else int(n)
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if xp is not np and labels.dtype == xp.int32 and labels.ndim in (2, 3) and n * n < _MAX_PAIR_BITS:
        shape = (1,) * (3 - labels.ndim) + labels.shape
        blocks = int(min(-(-labels.size // 256), _PAIR_BLOCKS))
        index_type = "int" if _int_loop_fits(labels.size, blocks * 256) else "long long"
        bitmap = xp.zeros(-(-n * n // 32), dtype=xp.uint32)
        total = np.int32(labels.size) if index_type == "int" else np.int64(labels.size)
        _merge_kernels(index_type)["pairs"](
            (blocks,), (256,),
            (xp.ascontiguousarray(labels), np.int32(shape[0]), np.int32(shape[1]), np.int32(shape[2]), np.int32(n),
             bitmap, total))
        # only the words with a bit set come to the host (a few per object, against n^2 / 8 bytes)
        words = xp.flatnonzero(bitmap)
        return _pairs_from_bitmap_words(to_host(words), to_host(bitmap[words]), n)
    codes = []
    for axis in range(labels.ndim):
        moved = xp.moveaxis(labels, axis, 0)
        a, b = moved[:-1], moved[1:]
        touch = (a != b) & (a > 0) & (b > 0)
        lo = xp.minimum(a, b)[touch].astype(xp.int64)
        hi = xp.maximum(a, b)[touch].astype(xp.int64)
        codes.append(lo * (n + 1) + hi)
    codes = to_host(xp.unique(xp.concatenate(codes)))
    return np.stack([codes // (n + 1), codes % (n + 1)], axis=1)


def _pairs_from_bitmap_words(words, values, n: int) -> np.ndarray:
    """(P, 2) pairs (a, b), sorted, of the set bits (a - 1) n + (b - 1) of a bitmap of 32-bit
    words, given as the ascending indices ``words`` of its non-zero words and their ``values``."""
    words = np.asarray(words, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint32)
    k = np.arange(32, dtype=np.uint32)
    set_bits = ((values[:, None] >> k) & np.uint32(1)).astype(bool)
    bits = (words[:, None] * 32 + k.astype(np.int64))[set_bits]
    return np.stack([bits // n + 1, bits % n + 1], axis=1).astype(np.int64)


def _non_vertex_ends(any_x, first, last, axis):
    """(drop_first, drop_last): x-line ends that are no vertex of the hull of all line ends.

    An end p of line (z, y) lies between the midpoint of the same ends of the two neighbouring
    lines along ``axis`` (0: z, 1: y) and its own line's other end (or the midpoint of those
    lines' other ends), so p is a convex combination of other line ends; dropping every such
    point together leaves the hull unchanged (a hull is that of its vertices).
    """
    f, l = first.astype(np.float64), last.astype(np.float64)
    lo, mid, hi = ([slice(None)] * 2 for _ in range(3))
    lo[axis], mid[axis], hi[axis] = slice(0, -2), slice(1, -1), slice(2, None)
    lo, mid, hi = tuple(lo), tuple(mid), tuple(hi)
    both = np.zeros(any_x.shape, dtype=bool)
    both[mid] = any_x[lo] & any_x[hi]
    mid_first = np.full(any_x.shape, np.inf)
    mid_last = np.full(any_x.shape, -np.inf)
    mid_first[mid] = np.where(both[mid], 0.5 * (f[lo] + f[hi]), np.inf)
    mid_last[mid] = np.where(both[mid], 0.5 * (l[lo] + l[hi]), -np.inf)
    drop_first = both & (mid_first <= f) & ((f < l) | (f <= mid_last))
    drop_last = both & (l <= mid_last) & ((l > f) | (l >= mid_first))
    return drop_first, drop_last


def _hull_equations_3d(mask: np.ndarray) -> np.ndarray:
    """(F, 4) facet equations (n . p + d <= 0 inside, one per plane) of the hull that
    ``skimage.morphology.convex_hull_image(mask)`` (3D) builds: that of the voxels' face
    centres, but only of the first and last voxel of every x line that can be a vertex of
    their hull (which spans the same hull)."""
    from scipy.spatial import ConvexHull

    nx = mask.shape[2]
    any_x = mask.any(axis=2)
    first = np.argmax(mask, axis=2)
    last = nx - 1 - np.argmax(mask[:, :, ::-1], axis=2)
    keep_first, keep_last = any_x.copy(), any_x.copy()
    for axis in (0, 1):
        drop_first, drop_last = _non_vertex_ends(any_x, first, last, axis)
        keep_first &= ~drop_first
        keep_last &= ~drop_last
    zf, yf = np.nonzero(keep_first)
    zl, yl = np.nonzero(keep_last)
    points = np.concatenate([np.stack([zf, yf, first[zf, yf]], 1), np.stack([zl, yl, last[zl, yl]], 1)])
    if _coplanar(points):
        # a flat object: scikit-image's hull of the voxels fails (empty image), and so does this
        raise ValueError("the mask's voxels are coplanar: no 3D convex hull")
    # face centres on the doubled (integer) grid; a face shared with another voxel of the mask
    # is the midpoint of two voxel centres, no vertex of the hull: only exposed faces count
    padded = np.pad(mask, 1)
    offsets = np.concatenate([np.eye(3, dtype=np.int64), -np.eye(3, dtype=np.int64)])
    neighbours = points[:, None, :] + offsets + 1  # (P, 6, 3) in the padded mask
    exposed = ~padded[neighbours[..., 0], neighbours[..., 1], neighbours[..., 2]]
    doubled = ((2 * points)[:, None, :] + offsets)[exposed] + 1
    size = 2 * np.asarray(mask.shape, dtype=np.int64) + 3
    codes = np.unique((doubled[:, 0] * size[1] + doubled[:, 1]) * size[2] + doubled[:, 2])
    coords = np.stack([codes // (size[1] * size[2]), (codes // size[2]) % size[1], codes % size[2]], 1)
    centres = 0.5 * (coords - 1).astype(np.float64)
    try:  # without qhull's pre-merging of coplanar facets: faster on these lattice points
        equations = ConvexHull(centres, qhull_options="Q0").equations
    except Exception:  # a precision error: qhull's default merging
        equations = ConvexHull(centres).equations
    # qhull triangulates: coplanar facets repeat one plane (to rounding), keep the first of each
    rounded = np.round(equations, 8)
    order = np.lexsort(rounded.T[::-1])  # stable: the first of equal rows stays first
    rows = rounded[order]
    new_plane = np.ones(len(rows), dtype=bool)
    new_plane[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    return np.ascontiguousarray(equations[np.sort(order[new_plane])])


def _coplanar(points: np.ndarray) -> bool:
    """Whether integer points (P, 3) lie in one plane (exact integer arithmetic)."""
    rel = points - points[0]
    nonzero = np.flatnonzero(np.any(rel != 0, axis=1))
    if len(nonzero) == 0:
        return True
    cross = np.cross(rel[nonzero[0]], rel)
    spanning = np.flatnonzero(np.any(cross != 0, axis=1))
    if len(spanning) == 0:
        return True  # collinear
    return not np.any(rel @ cross[spanning[0]])


HULL_TOLERANCE = 1e-10  # scikit-image's inclusion test: every facet equation below this at the voxel


def _count_in_hull_3d(equations: np.ndarray, shape) -> int:
    """Voxels of a (nz, ny, nx) grid inside the hull of ``equations`` (every facet equation
    below the tolerance), solved for the interval of x on each (z, y) line instead of testing
    every voxel against every facet. ``ivote_levelset_hull_count`` (levelset.cu) evaluates the
    same expressions in the same order on the GPU."""
    nz, ny, nx = shape
    z = np.arange(nz, dtype=np.float64)[:, None, None]
    y = np.arange(ny, dtype=np.float64)[None, :, None]

    def rest_of(rows):  # n_z z + n_y y + d on every (z, y) line, for the facets ``rows``
        e = equations[rows]
        return z * e[:, 0] + y * e[:, 1] + e[:, 3]

    c = equations[:, 2]
    flat = np.abs(c) < 1e-12
    pos, neg = (c > 0) & ~flat, (c < 0) & ~flat
    # c x + rest < tol for every facet
    lo = np.full((nz, ny), 0.0)
    hi = np.full((nz, ny), nx - 1.0)
    if pos.any():  # x < bound: the largest integer strictly below
        hi = np.minimum(hi, np.ceil((HULL_TOLERANCE - rest_of(pos)) / c[pos]).min(axis=-1) - 1)
    if neg.any():
        lo = np.maximum(lo, np.floor((HULL_TOLERANCE - rest_of(neg)) / c[neg]).max(axis=-1) + 1)
    ok = np.all(rest_of(flat) < HULL_TOLERANCE, axis=-1) if flat.any() else np.ones((nz, ny), dtype=bool)
    return int(np.where(ok, np.clip(hi - lo + 1, 0, None), 0).sum())


def _hull_count_3d(mask: np.ndarray) -> int:
    """Voxels of ``skimage.morphology.convex_hull_image(mask)`` (3D), counted line by line."""
    return _count_in_hull_3d(_hull_equations_3d(mask), mask.shape)


def _device_hull_counts(equations, shapes, xp) -> np.ndarray:
    """:func:`_count_in_hull_3d` for many hulls in one launch of ``ivote_levelset_hull_count``
    (one thread per (hull, z, y) line, the same double-precision expressions)."""
    kernel = _merge_kernels("int")["hulls"]
    facet_start = np.concatenate([[0], np.cumsum([len(e) for e in equations])]).astype(np.int32)
    line_start = np.concatenate([[0], np.cumsum([s[0] * s[1] for s in shapes])]).astype(np.int32)
    total = int(line_start[-1])
    counts = xp.zeros(len(shapes), dtype=xp.uint64)
    args = (xp.asarray(np.concatenate(equations).astype(np.float64)), xp.asarray(facet_start), xp.asarray(line_start),
            xp.asarray(np.asarray(shapes, dtype=np.int32).reshape(-1)), counts, np.int32(len(shapes)),
            np.int32(total))
    kernel((max(1, min(-(-total // 128), 4096)),), (128,), args)
    return to_host(counts).astype(np.int64)


HULL_BOUND_ROUNDS = 2  # midpoint rounds of the hull's lower bound (the 3D benchmark's pairs: 0.97-0.99 of the hull)
_BOUND_DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1), (2, 1), (1, 2), (2, -1), (1, -2))


def _shift(values, dz, dy, fill):
    """``out[q] = values[q + (dz, dy)]`` (``fill`` where that lies outside)."""
    out = np.full_like(values, fill)
    nz, ny = values.shape
    out[max(0, -dz) : nz - max(0, dz), max(0, -dy) : ny - max(0, dy)] = \
        values[max(0, dz) : nz - max(0, -dz), max(0, dy) : ny - max(0, -dy)]
    return out


def _hull_count_lower_bound(mask: np.ndarray, rounds: int = HULL_BOUND_ROUNDS) -> int:
    """A lower bound on :func:`_hull_count_3d` (3D), exact and cheap on the GPU
    (``ivote_levelset_hull_columns`` and ``ivote_levelset_hull_round`` compute the same values).

    On the doubled (z, y) grid (voxel z at 2z + 1, its faces at 2z and 2z + 2), each column q gets
    the interval [L, H] of doubled x (2x + 1) spanned by the face centres in it; then each round
    raises H(q) to the midpoint of H(q - s d) and H(q + s d) where larger (L: lowers), for 8
    lattice directions d and every s, from the previous round's values. Midpoints of points of the
    hull stay in it, so the voxels with 2x + 1 in [L, H] of the voxel columns lie in the hull, and
    their count is at most the hull's. Every value is a dyadic rational (exact in float32 and
    float64): the GPU's values equal these bit for bit.
    """
    nz, ny, nx = mask.shape
    any_x = mask.any(axis=2)
    first = np.argmax(mask, axis=2).astype(np.float64)
    last = (nx - 1 - np.argmax(mask[:, :, ::-1], axis=2)).astype(np.float64)
    high = np.full((2 * nz + 1, 2 * ny + 1), -np.inf)
    low = np.full_like(high, np.inf)
    high[1::2, 1::2] = np.where(any_x, 2 * last + 2, -np.inf)  # x faces of the line's ends
    low[1::2, 1::2] = np.where(any_x, 2 * first, np.inf)
    face_high, face_low = np.where(any_x, 2 * last + 1, -np.inf), np.where(any_x, 2 * first + 1, np.inf)
    odd, lower, upper = slice(1, None, 2), slice(0, -1, 2), slice(2, None, 2)
    for where in ((odd, lower), (odd, upper), (lower, odd), (upper, odd)):  # y faces, then z faces
        high[where] = np.maximum(high[where], face_high)
        low[where] = np.minimum(low[where], face_low)
    span = max(high.shape)
    for _ in range(rounds):
        new_high, new_low = high.copy(), low.copy()
        for dz, dy in _BOUND_DIRECTIONS:
            for s in range(1, span):
                if s * dz >= high.shape[0] or s * abs(dy) >= high.shape[1]:
                    break
                new_high = np.maximum(new_high, 0.5 * (_shift(high, -s * dz, -s * dy, -np.inf)
                                                       + _shift(high, s * dz, s * dy, -np.inf)))
                new_low = np.minimum(new_low, 0.5 * (_shift(low, -s * dz, -s * dy, np.inf)
                                                     + _shift(low, s * dz, s * dy, np.inf)))
        high, low = new_high, new_low
    top, bottom = high[1::2, 1::2], low[1::2, 1::2]
    ok = np.isfinite(top) & np.isfinite(bottom)
    voxels = np.floor(0.5 * (np.where(ok, top, 0.0) - 1.0)) - np.ceil(0.5 * (np.where(ok, bottom, 0.0) - 1.0)) + 1
    return int(np.where(ok, np.clip(voxels, 0, None), 0).sum())


def _device_hull_lower_bounds(labels, pairs, regions, rounds: int = HULL_BOUND_ROUNDS) -> np.ndarray:
    """:func:`_hull_count_lower_bound` of the union of labels a and b in ``regions`` (slices of
    the 3D int32 label image on the GPU) for every pair, in 1 + ``rounds`` launches."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1; got {rounds}")
    params = np.zeros((len(pairs), 8), dtype=np.int32)
    for k, ((a, b), region) in enumerate(zip(pairs, regions)):
        params[k, :2] = a, b
        ranges = [range(*r.indices(n)) for r, n in zip(region, labels.shape)]
        params[k, 2:5] = [r.start for r in ranges]
        params[k, 5:] = [len(r) for r in ranges]
    columns = (2 * params[:, 5].astype(np.int64) + 1) * (2 * params[:, 6].astype(np.int64) + 1)
    # pairs in chunks of at most _BOUND_COLUMNS columns: int32 column indices in the kernels, and
    # 16 bytes a column on the device (many pairs of large boxes would overflow both)
    counts = []
    for chunk in _chunks(columns, _BOUND_COLUMNS):
        counts.append(_device_hull_lower_bounds_chunk(labels, params[chunk], columns[chunk], rounds))
    return np.concatenate(counts)


_BOUND_COLUMNS = 1 << 25  # columns of one chunk of _device_hull_lower_bounds (512 MB of H, L)
_BOUND_BLOCKS = 8192  # blocks of the hull-bound kernels' grid-stride loops


def _chunks(sizes, budget: int) -> list:
    """Consecutive slices of ``sizes`` whose sums stay within ``budget`` (an item larger than the
    budget alone in its slice)."""
    chunks, start, total = [], 0, 0
    for k, size in enumerate(sizes):
        if k > start and total + int(size) > budget:
            chunks.append(slice(start, k))
            start, total = k, 0
        total += int(size)
    chunks.append(slice(start, len(sizes)))
    return chunks


def _device_hull_lower_bounds_chunk(labels, params, columns, rounds: int) -> np.ndarray:
    """:func:`_device_hull_lower_bounds` of the pairs ``params`` (rows a, b, origin, shape)."""
    xp = get_array_module(labels)
    n_pairs = len(params)
    col_start = np.concatenate([[0], np.cumsum(columns, dtype=np.int64)])
    total = int(col_start[-1])
    if not _int_loop_fits(total, _BOUND_BLOCKS * 128):  # one pair past int32 columns: no bound (rejects nothing)
        return np.zeros(n_pairs, dtype=np.int64)
    kernels = _merge_kernels("int")
    params_d, col_start_d = xp.asarray(params), xp.asarray(col_start.astype(np.int32))
    high, low = [xp.empty(total, dtype=xp.float32) for _ in range(2)], [xp.empty(total, dtype=xp.float32) for _ in range(2)]
    counts = xp.zeros(n_pairs, dtype=xp.uint64)
    grid, block = (max(1, min(-(-total // 128), _BOUND_BLOCKS)),), (128,)
    labels = xp.ascontiguousarray(labels)
    kernels["columns"](grid, block, (labels, np.int32(labels.shape[1]), np.int32(labels.shape[2]), params_d,
                                     col_start_d, np.int32(n_pairs), high[0], low[0], np.int32(total)))
    for r in range(rounds):
        kernels["round"](grid, block, (high[r % 2], low[r % 2], high[1 - r % 2], low[1 - r % 2], params_d, col_start_d,
                                       np.int32(n_pairs), counts if r == rounds - 1 else np.uint64(0),
                                       np.int32(total)))
    return to_host(counts).astype(np.int64)


def solidity(mask: np.ndarray) -> float:
    """Area (volume) of ``mask`` over that of its convex hull, as scikit-image computes the hull."""
    if mask.ndim == 3:
        hull = _hull_count_3d(mask)
    else:
        from skimage.morphology import convex_hull_image

        hull = int(convex_hull_image(mask).sum())
    return float(mask.sum()) / max(float(hull), 1.0)


def _safe_solidity(mask):
    try:
        return solidity(mask)
    except Exception:  # degenerate hull (flat objects)
        return None


def _pair_region(shape, a, b, boxes):
    """Slices of the image that hold labels a and b (their boxes' union), or all of it."""
    if boxes is None:
        return tuple(slice(None) for _ in shape)
    origins, box_shape = boxes
    return tuple(
        slice(max(0, min(origins[a - 1][j], origins[b - 1][j])),
              max(0, min(shape[j], max(origins[a - 1][j], origins[b - 1][j]) + box_shape[j])))
        for j in range(len(shape)))


_MASK_BYTES = 1 << 28  # union masks of one launch and transfer of _union_masks


def _union_masks(labels, pairs, boxes):
    """Host crops of (labels == a) | (labels == b) for every pair (a, b), tight around each
    union: built on the labels' backend and brought to the host in one transfer."""
    xp = get_array_module(labels)
    if len(pairs) == 0:
        return []
    regions = [_pair_region(labels.shape, a, b, boxes) for a, b in pairs]
    shapes = [tuple(len(range(*r.indices(n))) for r, n in zip(region, labels.shape)) for region in regions]
    sizes = np.array([int(np.prod(shape)) for shape in shapes], dtype=np.int64)
    if xp is not np and labels.ndim in (2, 3) and labels.dtype == xp.int32:
        # one launch and one transfer for all pairs (for a chunk of _MASK_BYTES bytes of them)
        params = np.zeros((len(pairs), 8), dtype=np.int32)
        for k, ((a, b), region, shape) in enumerate(zip(pairs, regions, shapes)):
            params[k, :2] = a, b
            params[k, 2 + 3 - labels.ndim : 5] = [r.start or 0 for r in region]
            params[k, 5 : 5 + 3 - labels.ndim] = 1
            params[k, 8 - labels.ndim :] = shape
        image = (1,) * (3 - labels.ndim) + labels.shape
        contiguous = xp.ascontiguousarray(labels)
        parts = []
        for chunk in _chunks(sizes, _MASK_BYTES):
            starts = np.concatenate([[0], np.cumsum(sizes[chunk], dtype=np.int64)])
            out = xp.empty(int(starts[-1]), dtype=xp.uint8)
            _merge_kernels("int")["masks"](
                (int(max(1, min(-(-int(starts[-1]) // 256), 1 << 16))),), (256,),
                (contiguous, np.int32(image[1]), np.int32(image[2]), xp.asarray(params[chunk]),
                 xp.asarray(starts), np.int32(len(params[chunk])), out, np.int64(starts[-1])))
            parts.append(to_host(out).view(bool))
        host = np.concatenate(parts) if len(parts) > 1 else parts[0]
    else:
        host = np.concatenate([((labels[r] == a) | (labels[r] == b)).ravel() for (a, b), r in zip(pairs, regions)])
    masks, start = [], 0
    for size, shape in zip(sizes, shapes):
        union = host[start : start + size].reshape(shape)
        start += size
        tight = []
        for axis in range(union.ndim):  # the extent along each axis, from the projection on it
            along = union.any(axis=tuple(a for a in range(union.ndim) if a != axis))
            hits = np.flatnonzero(along)
            tight.append(slice(int(hits[0]), int(hits[-1]) + 1) if len(hits) else slice(0, 0))
        masks.append(union[tuple(tight)])
    return masks


def _safe_equations(mask):
    try:
        return _hull_equations_3d(mask)
    except Exception:  # degenerate hull (flat objects)
        return None


def _threaded(function, items):
    if len(items) < 3:
        return [function(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=max(1, min(8, cores, len(items)))) as pool:
        return list(pool.map(function, items))


def _pair_solidities(masks, xp):
    """Solidity of every union mask (None where its hull is degenerate). 3D unions on the GPU:
    the hulls' facets on host threads (qhull), the voxel counts in one kernel launch."""
    if not masks:
        return []
    if masks[0].ndim != 3 or xp is np:
        return _threaded(_safe_solidity, masks)
    equations = _threaded(_safe_equations, masks)
    ok = [k for k, e in enumerate(equations) if e is not None]
    values = [None] * len(masks)
    if ok:
        counts = _device_hull_counts([equations[k] for k in ok], [masks[k].shape for k in ok], xp)
        for k, count in zip(ok, counts):
            values[k] = float(masks[k].sum()) / max(float(count), 1.0)
    return values


def _host_hull_lower_bounds(labels, pairs, regions, rounds: int = HULL_BOUND_ROUNDS) -> np.ndarray:
    """:func:`_device_hull_lower_bounds` on the host (NumPy labels): the reference of the tests."""
    return np.array([_hull_count_lower_bound((labels[r] == a) | (labels[r] == b), rounds)
                     for (a, b), r in zip(pairs, regions)], dtype=np.int64)


def _unless_bound_rejects(labels, pairs, sizes, boxes, min_solidity, bounds=None):
    """The pairs whose solidity can still reach ``min_solidity``. A pair goes when its voxels
    over :func:`_hull_count_lower_bound` (at most the hull's voxels) fall short: the full hull
    would reject it too, its solidity being at most that ratio. ``bounds(labels, pairs,
    regions)``: the bounds' function; None: the GPU's (3D int32 labels on the GPU), and no test
    elsewhere, so that the NumPy path (full hulls only) makes the same decisions."""
    xp = get_array_module(labels)
    if bounds is None:
        if xp is np or labels.ndim != 3 or labels.dtype != xp.int32:
            return pairs
        bounds = _device_hull_lower_bounds
    if len(pairs) == 0:
        return pairs
    regions = [_pair_region(labels.shape, a, b, boxes) for a, b in pairs]
    lower = bounds(labels, pairs, regions)
    return [(a, b) for (a, b), bound in zip(pairs, lower)
            if bound <= 0 or float(sizes[a] + sizes[b]) / float(bound) >= min_solidity]


def merge_split_objects(labels, *, max_volume: float, min_solidity: float = 0.95, boxes=None, sizes=None,
                        mark=None):
    """Relabel ``labels`` (NumPy or CuPy) so that convex, small-enough touching pairs become one object.

    ``max_volume`` is in pixels. Each object merges at most once (with the partner giving the
    most convex union); the merged object keeps the lower label. ``boxes``: optional
    ``(origins (N, ndim), box_shape)`` of the regions that hold each label k (row k - 1), so
    that only those are searched for a candidate pair's pixels; ``sizes``: optional array
    (host, or on the labels' backend) of every label's pixel count (index = label), found by
    a bincount otherwise.
    The convex hulls of the candidate pairs are computed on a few threads (qhull and
    NumPy release the GIL); on the GPU, their 3D voxel counts in one kernel launch. ``mark``: optional ``mark(phase)`` called at the end of each
    phase (profiling).
    """
    mark = mark if mark is not None else (lambda phase: None)
    xp = get_array_module(labels)
    n = len(sizes) - 1 if sizes is not None else int(labels.max())
    pairs = _touching_pairs(labels, n)
    mark("merge: touching pairs")
    if len(pairs) == 0:
        return labels
    if sizes is None:
        sizes = xp.bincount(labels.ravel(), minlength=n + 1)
    sizes = to_host(sizes)
    if boxes is not None:
        boxes = (np.asarray(to_host(boxes[0])), tuple(boxes[1]))
    small = [(int(a), int(b)) for a, b in pairs if sizes[a] + sizes[b] <= max_volume]
    small = _unless_bound_rejects(labels, small, sizes, boxes, min_solidity)
    mark("merge: hull bounds")
    unions = [(a, b, union) for (a, b), union in zip(small, _union_masks(labels, small, boxes))
              if min(union.shape) >= 2]
    mark("merge: union masks")
    values = _pair_solidities([u for _, _, u in unions], xp)
    mark("merge: hulls")
    candidates = [(value, a, b) for (a, b, _), value in zip(unions, values)
                  if value is not None and value >= min_solidity]
    if not candidates:
        return labels
    lut = np.arange(n + 1, dtype=np.int32)
    used = set()
    for _, a, b in sorted(candidates, reverse=True):
        if a in used or b in used:
            continue
        used.update((a, b))
        lut[b] = a
    return xp.asarray(lut)[labels]


def max_volume_pixels(radius: float, spacing) -> float:
    """Volume (pixels) of a disc/ball of ``radius`` (physical units)."""
    ndim = len(spacing)
    unit = math.pi if ndim == 2 else 4.0 / 3.0 * math.pi
    return unit * radius**ndim / float(np.prod(spacing))
