"""CPU side of the evolution: Numba kernels that read like ``kernels/levelset.cu``.

:class:`NumbaStepper` has the entry points of :class:`~._reference.ReferenceStepper` and
:class:`~._cuda.CudaStepper` (``fit``, ``prior``, ``run``, ``reinitialise``, ``labels``); its
kernels are serial ``@njit(nogil=True, cache=True)`` loops over a range of objects or image
lines, run on ranges in parallel by ``ivote._parallel.for_ranges`` (they compile several times
sooner than ``parallel=True`` loops), so no two threads write the same cell:

* :func:`_step` (one iteration of every object, curvature + Chan-Vese + shape prior +
  overlap, as ``ivote_levelset_step``): parallel over objects; it also leaves the compact
  Heaviside of the new level set in ``hc`` and the object's region sums, which the next
  iteration reads (the CUDA kernel's rotating ``canvas``/``sums`` buffers);
* :func:`_canvas` (the image-sized sum of the compact Heavisides, the image flattened):
  parallel over image lines (a line is a row of a 2D image, a (z, y) row of a volume), each
  line adding the boxes that cover it, so the scatter of overlapping boxes needs no atomics;
* :func:`_reinitialise` (exact separable distance transforms of every box, as
  ``ivote_levelset_edt_*``): it also measures the moments of each box's inside cells
  (:func:`_measure_box`), which the shape prior's fit of the next block reads (a moments-only
  pass of the same kernel serves a fit of any other level set); :func:`_prior` evaluates the
  fitted prior; the labels (largest positive level set per pixel) are one NumPy pass.

2D runs as 3D with one plane (``bz = 1``, z neighbours 0 apart so the z terms vanish): one
compiled specialisation per kernel serves both. Arithmetic is float32 like the reference,
with two polynomial kernels where libm would stop the loops from vectorising (arctan and
sin(pi u), both within a few float32 ulps); sums over cells are float64.

Compilation (paid once per machine, at the first segmentation) is kept short: the small
helpers are inlined into their kernel by Numba (``_inline``: no compilation of their own),
the stencil and the region sums have one call site each, 2D and 3D share every loop,
set-up work stays in NumPy (:func:`_line_lists`, the labels), and no kernel assigns whole
arrays (whose shape checks compile string formatting). Boxes come flattened, (N, cells) with
the box shape beside them, indexed by unsigned offsets rather than sliced (a slice's view
compiles its bounds handling); scratch is 1D and allocated by the intrinsic :func:`_empty`
(``np.empty`` compiles a function per dtype; ``reshape``, ``ravel`` and ``np.zeros`` each
cost 0.1-0.25 s of compilation in a kernel). Five compilations in all (four kernels called
from Python and :func:`_measure_box`, which has no Python wrapper); each has one signature
whatever the input (see ``tests/core/test_segment_numba.py``).

Where each part lives: the float32 constants and smooth functions in
``_numba_float32.py``, the reinitialisation in ``_numba_distances.py``; here the
iteration, the canvas, the prior and :class:`NumbaStepper`. Every compiled function
is importable from here too (one namespace that lists them: ``ivote._compile``'s
tests read it).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._backend import numba_lock
from .._compile import compile_ahead_once
from .._numba_intrinsics import _empty, _max, _min
from .._parallel import for_ranges
from ._numba_distances import _envelope, _measure_box, _reinitialise  # noqa: F401
from ._numba_float32 import (_CONTRAST_FLOOR, _CONTRAST_MIN, _FAST, _G2_EPS, _ONE, _TWO, _ZERO, F32,  # noqa: F401
                             _atan, _heaviside, _heaviside_compact, _inline, _sinpi, _valid_x)
from ._shape_prior import poses_from_moments

__all__ = ["NumbaStepper"]


@_inline
def _next(phi, g2, num, value, psi, overlap, k):
    """phi^(k+1) of one interior cell from its curvature terms (ivote_levelset_next); ``overlap``
    is the other objects' compact Heavisides at the cell, clipped to [0, 1], and ``k`` the
    object's constants from :func:`_step`: same formulas and order as _reference.step."""
    c_in, c_out, inv_contrast, l1, l2, mu, beta, omega, eps, dt, kappa_max, eps_over_pi = k
    g2e = g2 + _G2_EPS
    kappa = _min(_max(num / (g2e * np.sqrt(g2e)), -kappa_max), kappa_max)
    region_max = _max(l1, l2)
    region = (-l1 * (value - c_in) * (value - c_in) + l2 * (value - c_out) * (value - c_out)) * inv_contrast
    region = _min(_max(region, -region_max), region_max)
    shape = _min(_max(psi - phi, -_ONE), _ONE)
    force = mu * kappa + region + beta * shape - omega * overlap
    return phi + dt * (eps_over_pi / (eps * eps + phi * phi)) * force


# The stencil indexes with unsigned integers: Numba adds a wrap-around of negative indices to every
# signed index (src[c - 1] with c possibly 0, as far as LLVM knows), which would turn each neighbour
# load into a scalar gather (2x slower loops); 19 views starting at each neighbour's offset avoid
# it too, but their set-up code took a third of the kernel's compilation.
@_inline
def _plane(dst, src, image, psi, overlap, start, stop, bx, plane, k, coef):
    """Update cells [start, stop) of a box flattened (z, y, x), z neighbours ``plane`` apart:
    central differences with the cross-derivatives, as ivote_levelset_next. One long loop, so
    that it vectorises without a scalar tail per row; the box-edge columns it also computes
    (their x neighbours wrap to the next row) are frozen and put back by the caller. A 2D box
    passes ``plane = 0``: its z differences are then exactly 0 and so are the z terms (one
    stencil, compiled once, for 2D and 3D)."""
    hz, hy, hx, hzz, hyy, hxx = coef[14], coef[15], coef[16], coef[17], coef[18], coef[19]
    hzy, hzx, hyx = coef[20], coef[21], coef[22]
    # unsigned indices: Numba adds no wrap-around of negative indices to their loads
    one, row, pl = np.uint64(1), np.uint64(bx), np.uint64(plane)
    for c in range(np.uint64(start), np.uint64(stop)):
        v = src[c]
        w, e, n, s = src[c - one], src[c + one], src[c - row], src[c + row]
        d, u = src[c - pl], src[c + pl]
        px = (e - w) * hx
        py = (s - n) * hy
        pz = (u - d) * hz
        pxx = (e - _TWO * v + w) * hxx
        pyy = (s - _TWO * v + n) * hyy
        pzz = (u - _TWO * v + d) * hzz
        pyx = (src[c + row + one] - src[c + row - one] - src[c - row + one] + src[c - row - one]) * hyx
        pzy = (src[c + pl + row] - src[c + pl - row] - src[c - pl + row] + src[c - pl - row]) * hzy
        pzx = (src[c + pl + one] - src[c + pl - one] - src[c - pl + one] + src[c - pl - one]) * hzx
        g2 = pz * pz + py * py + px * px
        num = pzz * (g2 - pz * pz) + pyy * (g2 - py * py) + pxx * (g2 - px * px)
        num = num - _TWO * pz * py * pzy - _TWO * pz * px * pzx - _TWO * py * px * pyx
        dst[c] = _next(v, g2, num, image[c], psi[c], overlap[c], k)


@_inline
def _accumulate_box(box, image, valid, hc, h, inv_eps):
    """Compact Heavisides of a new (flattened) box into hc; its region sums over the valid
    cells (sum of H I, of H), in float64. Two passes, H (0 on invalid cells) into the scratch
    h first: the float64 sums in the loop of the Heavisides would halve its vector width."""
    for c in range(box.shape[0]):
        v = box[c]
        hc[c] = _heaviside_compact(v, inv_eps)
        h[c] = _heaviside(v, inv_eps) if valid[c] else _ZERO
    acc_hi = 0.0
    acc_h = 0.0
    for c in range(box.shape[0]):
        acc_hi += h[c] * image[c]
        acc_h += h[c]
    return acc_hi, acc_h


# -- one iteration ---------------------------------------------------------------------------------
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=_FAST, error_model="numpy")
def _step(first, last, phi, out, image_box, psi, canvas, image_shape, sums_in, region_consts, origins, valid, frozen,
          box, coef, hc, sums_out, update):
    """One explicit iteration of objects first..last (``update`` False: copy, after a reinitialisation).

    phi, out, image_box, psi, hc: (N, cells) float32, each row a box of shape ``box`` (bz, by,
    bx) flattened; valid, frozen: (N, cells) bool, the cell lies in the image; it is a box border
    or outside the image (it keeps its value); canvas: the image (image_shape: iz, iy, ix)
    flattened, the compact Heavisides of phi summed over objects (from :func:`_canvas`), hc
    those of phi on entry and of out on return; sums_in / sums_out (N, 2) float64: sum of H(phi) I
    and of H(phi) over valid cells, of phi and of out; origins (N, 3).
    """
    cells = phi.shape[1]
    bz, by, bx = box[0], box[1], box[2]
    iz, iy, ix = image_shape[0], image_shape[1], image_shape[2]
    plane = by * bx
    z_step = plane if bz > 1 else 0  # a 2D box: z neighbours 0 apart, so the z terms vanish
    inv_eps = coef[12]
    # the other objects' overlap at each cell of one box (cells outside the image keep stale
    # values: they are frozen), then the scratch of the region sums
    overlap = _empty(cells, np.float32)
    for c in range(cells):
        overlap[c] = _ZERO
    for obj in range(first, last):
        src, dst, image, psi_box, hc_box = phi[obj], out[obj], image_box[obj], psi[obj], hc[obj]
        if update:
            s_hi = F32(sums_in[obj, 0])
            s_h = F32(sums_in[obj, 1])
            c_in = s_hi / _max(s_h, _G2_EPS)
            c_out = (region_consts[obj, 0] - s_hi) / _max(region_consts[obj, 1] - s_h, _G2_EPS)
            c_in = _max(c_in, c_out + _CONTRAST_FLOOR)
            inv_contrast = _ONE / _max((c_in - c_out) * (c_in - c_out), _CONTRAST_MIN)
            # levelset.cu's coef: lambda1, lambda2, mu, beta, omega, eps, dt, kappa_max, eps/pi
            k = (c_in, c_out, inv_contrast, coef[0], coef[1], coef[2], coef[3], coef[4], coef[5], coef[6], coef[7],
                 coef[13])
            # the other objects at every cell: the canvas less this object's own compact
            # Heaviside (hc holds that of phi), clipped as _reference.step
            oz, oy, ox = origins[obj, 0], origins[obj, 1], origins[obj, 2]
            lo, hi = _valid_x(ox, bx, ix)
            for z in range(bz):
                for y in range(by):
                    if oz + z >= 0 and oz + z < iz and oy + y >= 0 and oy + y < iy:
                        cell = np.uint64(z * plane + y * bx + lo)
                        pixel = np.uint64(((oz + z) * iy + oy + y) * ix + ox + lo)
                        for x in range(np.uint64(0), np.uint64(_max(hi - lo, 0))):
                            overlap[cell + x] = _min(_max(canvas[pixel + x] - hc_box[cell + x], _ZERO), _ONE)
            # every cell but the first and last plane (3D) and row, then the frozen ones put back
            _plane(dst, src, image, psi_box, overlap, z_step + bx + 1, cells - z_step - bx - 1, bx, z_step, k, coef)
            keep = frozen[obj]
            for c in range(cells):
                if keep[c]:
                    dst[c] = src[c]
        else:
            for c in range(cells):
                dst[c] = src[c]
        sums_out[obj, 0], sums_out[obj, 1] = _accumulate_box(dst, image, valid[obj], hc_box, overlap, inv_eps)


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, fastmath=_FAST, error_model="numpy")
def _canvas(first, last, hc, origins, box, image_shape, line_start, line_objects, canvas):
    """canvas[pixel] = sum over the boxes covering it of hc (their valid cells), on image lines
    first..last (lines run in parallel), each line's covering boxes from the CSR lists; hc
    (N, cells), boxes of shape ``box`` flattened, canvas the image (iz, iy, ix) flattened."""
    by, bx = box[1], box[2]
    iy, ix = image_shape[1], image_shape[2]
    for line in range(first, last):
        start, stop = line_start[line], line_start[line + 1]
        gz, gy = line // iy, line % iy
        for k in range(start, stop):
            ox = origins[line_objects[k], 2]
            lo, hi = _valid_x(ox, bx, ix)
            pixel = np.uint64(line * ix + ox + lo)
            for x in range(np.uint64(0), np.uint64(_max(hi - lo, 0))):
                canvas[pixel + x] = _ZERO
        for k in range(start, stop):
            obj = line_objects[k]
            ox = origins[obj, 2]
            lo, hi = _valid_x(ox, bx, ix)
            pixel = np.uint64(line * ix + ox + lo)
            cell = np.uint64(((gz - origins[obj, 0]) * by + gy - origins[obj, 1]) * bx + lo)
            box_hc = hc[obj]
            for x in range(np.uint64(0), np.uint64(_max(hi - lo, 0))):
                canvas[pixel + x] += box_hc[cell + x]


def _line_lists(origins, box, image):
    """CSR lists of the boxes covering each image line (ascending object order), in NumPy:
    set-up work, not worth a compiled kernel (each one costs compilation at the first call)."""
    n, (bz, by), (iz, iy) = len(origins), box[:2], image[:2]
    z = origins[:, :1] + np.arange(bz)  # (n, bz) image planes of each box
    y = origins[:, 1:2] + np.arange(by)  # (n, by) image rows
    inside = ((z >= 0) & (z < iz))[:, :, None] & ((y >= 0) & (y < iy))[:, None, :]
    lines = (z[:, :, None] * iy + y[:, None, :])[inside]
    objects = np.broadcast_to(np.arange(n)[:, None, None], inside.shape)[inside]
    order = np.argsort(lines, kind="stable")  # boxes come in object order: stable keeps it per line
    start = np.zeros(iz * iy + 1, dtype=np.int64)
    np.cumsum(np.bincount(lines, minlength=iz * iy), out=start[1:])
    return start, objects[order].astype(np.int64)


# -- the shape prior -------------------------------------------------------------------------------
@njit(cache=True, nogil=True, no_cfunc_wrapper=True, error_model="numpy")
def _prior(first, last, pose, templates, box, spacing, extent, ndim, t, psi):
    """psi[obj] (objects first..last) = the object's fitted prior SDF on its box (ivote_levelset_prior_eval): u = R^T rel / s,
    multilinear interpolation of mean + sum_k w_k mode_k on the canonical grid (clamped), times s.
    templates: (1 + K, t**ndim), t nodes per axis. The object's mode weights are applied once per grid node (the
    same products and order as prior_sdf's per tap), then the same taps in the same order: one
    loop over the 2**ndim corners for 2D and 3D (the products in the order of the unrolled
    bilinear and trilinear sums). psi (N, cells), boxes of shape ``box`` flattened."""
    bz, by, bx = box[0], box[1], box[2]
    nodes = templates.shape[1]
    n_modes = templates.shape[0] - 1
    inv_step = F32((t - 1) / (2.0 * extent))
    extent32 = F32(extent)
    top = F32(t - 1)
    shape = _empty(nodes, np.float32)  # mean + sum_k w_k mode_k, one object at a time
    longest = _max(_max(bz, by), bx)
    rel = _empty(3 * longest, np.float32)
    low = _empty(3, np.int64)
    frac = _empty(3, np.float32)
    for obj in range(first, last):
        p = pose[obj]
        scale = p[ndim + ndim * ndim]
        for node in range(nodes):
            tap = templates[0, node]
            for k in range(n_modes):
                tap = tap + p[ndim + ndim * ndim + 1 + k] * templates[1 + k, node]
            shape[node] = tap
        # rel[i * longest + position]: physical coordinate along box axis i, minus the object's centre
        for i in range(ndim):
            a = 3 - ndim + i
            for position in range(box[a]):
                rel[i * longest + position] = (F32(position) - F32((box[a] - 1) / 2)) * F32(spacing[a]) - p[i]
        for z in range(bz):
            for y in range(by):
                for x in range(bx):
                    for i in range(ndim):  # u_i = (R^T rel)_i / s, then its grid node and fraction (clamped)
                        u = _ZERO
                        for j in range(ndim):
                            a = 3 - ndim + j
                            position = x if a == 2 else (y if a == 1 else z)
                            u = u + p[ndim + j * ndim + i] * rel[j * longest + position]
                        g = _min(_max((u / scale + extent32) * inv_step, _ZERO), top)
                        low[i] = _min(np.int64(np.floor(g)), t - 2)
                        frac[i] = g - F32(low[i])
                    value = _ZERO
                    for corner in range(1 << ndim):  # the first axis is the corner's highest bit
                        weight = _ONE
                        node = 0
                        for i in range(ndim):
                            b = (corner >> (ndim - 1 - i)) & 1
                            weight = weight * (frac[i] if b else _ONE - frac[i])
                            node = node * t + low[i] + b
                        value = value + weight * shape[node]
                    psi[obj, (z * by + y) * bx + x] = value * scale


# -- the driver's interface ------------------------------------------------------------------------
def _coefficients(batch) -> np.ndarray:
    """levelset.cu's coef[] (z, y, x spacing; 2D boxes get hz = 1)."""
    ndim = len(batch.box_shape)
    w = batch.weights
    hz, hy, hx = (float(np.float32(h)) for h in (1.0,) * (3 - ndim) + tuple(batch.spacing))
    eps = float(np.float32(batch.eps))
    return np.array(
        [w["lambda1"], w["lambda2"], w["mu"], w["beta"], w["omega"], batch.eps, batch.dt, batch.kappa_max,
         hz, hy, hx, 0.0, 1.0 / eps, eps / np.float32(np.pi), 0.5 / hz, 0.5 / hy, 0.5 / hx,
         1.0 / hz**2, 1.0 / hy**2, 1.0 / hx**2, 0.25 / (hz * hy), 0.25 / (hz * hx), 0.25 / (hy * hx)],
        dtype=np.float32)


class NumbaStepper:
    """Advance a :class:`~._segment.Batch` with the Numba kernels: ``prior(fit(phi))`` once per
    block, then ``run(phi, count)``; ``reinitialise(phi, clip)`` and ``labels(phi)`` between and after.
    Arrays stay (N, *box) on the outside; inside, every box is one flattened row (N, cells) of a
    (bz, by, bx) box, 2D boxes with bz = 1."""

    def __init__(self, batch, *, block_length: int = 0, **_):
        self.batch = batch
        ndim = len(batch.box_shape)
        self.ndim = ndim
        n = batch.valid.shape[0]
        self.box3 = (1,) * (3 - ndim) + tuple(batch.box_shape)
        self.box = np.array(self.box3, dtype=np.int64)
        self.image3 = np.array((1,) * (3 - ndim) + tuple(batch.image_shape), dtype=np.int64)
        self.spacing3 = np.array((1.0,) * (3 - ndim) + tuple(batch.spacing), dtype=np.float64)
        self.coef = _coefficients(batch)
        origins = np.zeros((n, 3), dtype=np.int64)
        origins[:, 3 - ndim:] = np.asarray(batch.origins)
        self.origins = origins
        self.line_start, self.line_objects = _line_lists(origins, self.box, self.image3)
        shape2 = (n, int(np.prod(self.box3)))
        self.image_box = np.ascontiguousarray(batch.image_box, dtype=np.float32).reshape(shape2)
        self.region_consts = np.ascontiguousarray(np.stack([batch.sum_image, batch.n_valid], axis=1), dtype=np.float32)
        self.valid = np.ascontiguousarray(batch.valid, dtype=np.bool_).reshape(shape2)
        self.frozen = np.ascontiguousarray(batch.frozen, dtype=np.bool_).reshape(shape2)
        self.psi = np.zeros(shape2, dtype=np.float32)
        self.hc = np.zeros(shape2, dtype=np.float32)
        self.canvas = np.zeros(int(np.prod(self.image3)), dtype=np.float32)  # the image, flattened
        self.sums = [np.zeros((n, 2)), np.zeros((n, 2))]
        self.prior_model = batch.prior
        self.templates = np.ascontiguousarray(batch.prior.templates.reshape(batch.prior.templates.shape[0], -1))
        self._reinitialised = None  # (the last reinitialise's output, its moments)
        compile_ahead_once("segment", self._dry_run)  # the first segmentation in this process

    def _dry_run(self):
        """Every kernel of a segmentation, as ``ivote._compile.compile_ahead`` records them (no kernel
        runs, no state changes): their argument types do not depend on the batch's sizes."""
        phi = np.zeros(self.batch.valid.shape, dtype=np.float32)
        boxes = self._boxes(phi)
        self._measure(boxes, None, 0.0)
        self._measure(boxes, np.empty_like(boxes), 1.0)
        self.prior(np.zeros((len(self.psi), 1), dtype=np.float32))
        self.run(phi, 1)

    def _boxes(self, phi):
        return np.ascontiguousarray(phi, dtype=np.float32).reshape(phi.shape[0], -1)

    def _measure(self, boxes, out, clip):
        """:func:`_reinitialise` of ``boxes`` into ``out`` (None: the moments only); (any inside, moments)."""
        any_inside = np.zeros(len(boxes), dtype=np.bool_)
        moments = np.empty((len(boxes), 1 + self.ndim + self.ndim * (self.ndim + 1) // 2))
        with numba_lock:
            for_ranges(_reinitialise, len(boxes), boxes, self.origins, self.box, self.image3, self.spacing3,
                       float(clip), boxes if out is None else out, any_inside, moments, out is not None)
        return any_inside, moments

    def fit(self, phi):
        """Every object's pose, scale and mode weights from its mask (as _shape_prior.fit_poses). The
        masks' moments come with the reinitialisation that returned ``phi`` (its positive cells are
        the inside cells it measured), else from a pass over ``phi``."""
        last, self._reinitialised = self._reinitialised, None
        moments = last[1] if last is not None and last[0] is phi else self._measure(self._boxes(phi), None, 0.0)[1]
        return poses_from_moments(moments, self.batch.spacing, self.prior_model, np)

    def prior(self, pose):
        """Evaluate every object's fitted prior on its box into ``self.psi`` (read by the step)."""
        with numba_lock:
            for_ranges(_prior, len(self.psi), np.ascontiguousarray(pose, dtype=np.float32), self.templates, self.box,
                       self.spacing3, float(self.prior_model.extent), self.ndim, self.prior_model.grid_size, self.psi)
        return self.psi.reshape(self.batch.valid.shape)

    def run(self, phi, count: int):
        """``count`` iterations from ``phi`` with the prior last set by :meth:`prior`."""
        current = self._boxes(phi).copy()
        scratch = np.empty_like(current)
        sums_in, sums_out = self.sums
        args = (self.image_box, self.psi, self.canvas, self.image3)
        masks = (self.valid, self.frozen, self.box)
        with numba_lock:  # one block of iterations at a time (see _backend.numba_lock)
            # prime: the compact Heavisides and region sums of phi, then their canvas
            n, lines = len(current), int(self.image3[0] * self.image3[1])
            for_ranges(_step, n, current, scratch, *args, sums_out, self.region_consts, self.origins, *masks, self.coef,
                       self.hc, sums_in, False)
            for _ in range(count):
                for_ranges(_canvas, lines, self.hc, self.origins, self.box, self.image3, self.line_start,
                           self.line_objects, self.canvas, grain=16)
                for_ranges(_step, n, current, scratch, *args, sums_in, self.region_consts, self.origins, *masks,
                           self.coef, self.hc, sums_out, True)
                current, scratch = scratch, current
                sums_in, sums_out = sums_out, sums_in
        return current.reshape(self.batch.valid.shape)

    def reinitialise(self, phi, clip: float):
        """Exact signed distance to the current fronts (as _reference.reinitialise)."""
        boxes = self._boxes(phi)
        out = np.empty_like(boxes)
        any_inside, moments = self._measure(boxes, out, clip)
        if not any_inside.any():
            out[...] = -np.float32(clip)
        out = out.reshape(self.batch.valid.shape)
        self._reinitialised = (out, moments)  # read by the next fit(out), unless out changes meanwhile
        return out

    def labels(self, phi):
        """Each pixel to the object with the largest positive level set (ties: higher label): the
        objects in ascending order, each taking the pixels of its box (in the image) where it is
        positive and at least the best so far. In NumPy: one pass at the end, not worth a kernel
        (each one costs compilation at the first call)."""
        image = tuple(int(v) for v in self.image3)
        labels = np.zeros(image, dtype=np.int32)
        best = np.zeros(image, dtype=np.float32)
        boxes = self._boxes(phi).reshape((-1,) + self.box3)
        for obj, origin in enumerate(self.origins):
            lo = [max(0, -int(o)) for o in origin]
            hi = [min(b, i - int(o)) for b, i, o in zip(self.box3, image, origin)]
            if any(h <= low for low, h in zip(lo, hi)):
                continue
            inside = tuple(slice(low, h) for low, h in zip(lo, hi))
            placed = tuple(slice(int(o) + low, int(o) + h) for o, low, h in zip(origin, lo, hi))
            value, best_here, label_here = boxes[obj][inside], best[placed], labels[placed]
            take = (value > 0) & (value >= best_here)
            best_here[take] = value[take]
            label_here[take] = obj + 1
        return labels.reshape(self.batch.image_shape)
