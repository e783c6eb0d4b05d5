"""The reinitialisation of the Numba level sets: exact separable distance transforms of
every box (``ivote_levelset_edt_*``), which also measure the moments of each box's
inside cells (:func:`_measure_box`) for the shape prior's fit. Part of the Numba
level-set kernels (``_numba.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba_intrinsics import _empty, _max, _min
from ._numba_float32 import _EDT_INF, _FAST, _HALF, _ONE, _ZERO, F32, _inline, _valid_x

@_inline
def _envelope(f, n, h, out, v, bounds):
    """out[q] = min_p f[p] + ((q - p) h)^2 over the sites p with finite f (Felzenszwalb &
    Huttenlocher's lower envelope of parabolas), all float64; _EDT_INF where no site is."""
    k = -1
    h2 = h * h
    for q in range(n):
        if f[q] >= _EDT_INF:
            continue
        if k < 0:
            k = 0
            v[0] = q
            bounds[0] = -np.inf
            bounds[1] = np.inf
            continue
        while True:
            p = v[k]
            s = ((f[q] + h2 * q * q) - (f[p] + h2 * p * p)) / (2.0 * h2 * (q - p))
            if s <= bounds[k]:
                k -= 1
                if k < 0:
                    break
            else:
                break
        k += 1
        v[k] = q
        bounds[k] = s if k > 0 else -np.inf
        bounds[k + 1] = np.inf
    if k < 0:
        for q in range(n):
            out[q] = _EDT_INF
        return
    k = 0
    for q in range(n):
        while bounds[k + 1] < q:
            k += 1
        d = (q - v[k]) * h
        out[q] = d * d + f[v[k]]


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, no_cpython_wrapper=True, error_model="numpy")
def _measure_box(inside, box, spacing, moments, distances, g, f, result, sites, bounds):
    """Of the inside cells of one flattened box of shape ``box`` (in the image, phi > 0): their
    moments, the sums of [1, r_j, r_j r_k (j <= k)] with r the box-centred physical position
    (z, y, x; 2D boxes use y, x), float64, into ``moments`` (m,), for the shape prior's fit; then
    (``distances``) the squared physical distances: g[:cells] from inside cells to the nearest
    outside cell, g[cells:] from outside cells to the nearest inside cell (0 on the cells of the
    other kind, _EDT_INF when there is none): the lower envelope along x, then y, then z, through
    one line loop (strided lines of the flattened box; one envelope to compile). f, result,
    sites, bounds: scratch of the longest side (+1). Without fastmath (unlike its caller): its
    float64 sums and envelopes are neither reassociated nor contracted; called from
    :func:`_reinitialise` only, so without a Python wrapper (one less to compile)."""
    bz, by, bx = box[0], box[1], box[2]
    cells = bz * by * bx
    m = moments.shape[0]
    ndim = 3 if m == 10 else 2  # m = 1 + ndim + ndim (ndim + 1) / 2
    for j in range(m):
        moments[j] = 0.0
    for z in range(bz):
        for y in range(by):
            row = (z * by + y) * bx
            for x in range(bx):
                if not inside[row + x]:
                    continue
                r = ((z - 0.5 * (bz - 1)) * spacing[0], (y - 0.5 * (by - 1)) * spacing[1],
                     (x - 0.5 * (bx - 1)) * spacing[2])
                moments[0] += 1.0
                col = 1 + ndim
                for j in range(ndim):
                    rj = r[3 - ndim + j]
                    moments[1 + j] += rj
                    for k in range(j, ndim):
                        moments[col] += rj * r[3 - ndim + k]
                        col += 1
    if not distances:
        return
    for kind in range(2):
        offset = kind * cells
        for c in range(cells):
            g[offset + c] = _EDT_INF if inside[c] == (kind == 0) else 0.0
        for axis in range(2, -1, -1):  # x, y, z: the order of the sums of squares
            length = bx if axis == 2 else (by if axis == 1 else bz)
            stride = 1 if axis == 2 else (bx if axis == 1 else by * bx)
            if length == 1:
                continue
            for line in range(cells // length):
                base = offset + (line // stride) * stride * length + line % stride
                for i in range(length):
                    f[i] = g[base + i * stride]
                _envelope(f, length, spacing[axis], result, sites, bounds)
                for i in range(length):
                    g[base + i * stride] = result[i]


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=_FAST, error_model="numpy")
def _reinitialise(first, last, phi, origins, box, image_shape, spacing, clip, out, any_inside, moments, distances):
    """Exact signed distance to the current fronts in boxes first..last (as _reference.reinitialise):
    inside cells d_in - 1/2, outside -(_min(d_out, clip) - 1/2), cells with an axis neighbour
    (edge-replicated) on the other side keep their sub-pixel position phi / |grad phi|; and the
    moments of the inside cells (:func:`_measure_box`), which are those of ``out`` too (its
    positive cells in the image), for the next fit. ``distances`` False: the moments only.
    phi, out: (N, cells) float32, boxes of shape ``box`` flattened; moments (N, m) float64."""
    cells = phi.shape[1]
    bz, by, bx = box[0], box[1], box[2]
    iz, iy, ix = image_shape[0], image_shape[1], image_shape[2]
    three_d = bz > 1
    clip32 = F32(clip)
    step = (F32(2.0 * spacing[0]), F32(2.0 * spacing[1]), F32(2.0 * spacing[2]))
    inside = _empty(cells, np.bool_)  # one box at a time
    g = _empty(2 * cells, np.float64)
    longest = _max(_max(bx, by), bz)
    f = _empty(longest, np.float64)
    result = _empty(longest, np.float64)
    sites = _empty(longest, np.int64)
    bounds = _empty(longest + 1, np.float64)
    for obj in range(first, last):
        oz, oy, ox = origins[obj, 0], origins[obj, 1], origins[obj, 2]
        box_phi = phi[obj]
        for c in range(cells):
            inside[c] = False
        found = False
        lo, hi = _valid_x(ox, bx, ix)
        for z in range(bz):
            for y in range(by):
                if oz + z < 0 or oz + z >= iz or oy + y < 0 or oy + y >= iy:
                    continue
                row = (z * by + y) * bx
                for x in range(lo, hi):
                    if box_phi[row + x] > _ZERO:
                        inside[row + x] = True
                        found = True
        any_inside[obj] = found
        _measure_box(inside, box, spacing, moments[obj], distances, g, f, result, sites, bounds)
        if not distances:
            continue
        target = out[obj]
        for z in range(bz):
            zl, zh = _max(z - 1, 0), _min(z + 1, bz - 1)
            for y in range(by):
                yl, yh = _max(y - 1, 0), _min(y + 1, by - 1)
                row = (z * by + y) * bx
                north, south = (z * by + yl) * bx, (z * by + yh) * bx
                down, up = (zl * by + y) * bx, (zh * by + y) * bx
                for x in range(bx):
                    xl, xh = _max(x - 1, 0), _min(x + 1, bx - 1)
                    c = row + x
                    me = inside[c]
                    value = box_phi[c]
                    if me:
                        sdf = F32(np.sqrt(g[c])) - _HALF
                    else:
                        sdf = -(_min(F32(np.sqrt(g[cells + c])), clip32) - _HALF)
                    gx = (box_phi[row + xh] - box_phi[row + xl]) / step[2]
                    gy = (box_phi[south + x] - box_phi[north + x]) / step[1]
                    grad2 = gy * gy + gx * gx
                    near = (inside[row + xl] != me or inside[row + xh] != me
                            or inside[north + x] != me or inside[south + x] != me)
                    if three_d:
                        gz = (box_phi[up + x] - box_phi[down + x]) / step[0]
                        grad2 = gz * gz + grad2
                        near = near or inside[down + x] != me or inside[up + x] != me
                    if near:
                        sub = _min(_max(value / _max(np.sqrt(grad2), F32(0.1)), -_ONE), _ONE)
                        target[c] = _max(sub, F32(1e-3)) if me else _min(sub, F32(-1e-3))
                    else:
                        target[c] = sdf
