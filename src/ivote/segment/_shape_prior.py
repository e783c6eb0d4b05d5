"""Elliptical shape prior: PCA of aligned signed distance functions of ellipses.

As in Ali & Madabhushi (2012), the prior is trained once from 30 ellipses (or
ellipsoids) whose semi-axes vary as Gaussians; each is aligned (centred, its
axes along the canonical axes in ascending order, scaled to unit geometric-mean
radius) and turned into a signed distance function (SDF, positive inside) on a
canonical grid. The mean SDF and the first ``ndim`` principal modes form the
shape space. Each object is fitted for pose (centroid, orientation) and scale
from the second moments of its current mask; its mode weights come from a
linear regression of the training weights on the log axis ratios, clipped to
two standard deviations, so every fitted shape stays in the trained space.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy import ndimage as ndi

__all__ = ["ShapePrior", "train_shape_prior", "fit_poses", "poses_from_moments", "pose_size", "prior_sdf"]

N_TRAINING = 30
EXTENT = 2.0  # the canonical grid spans [-EXTENT, EXTENT] in units of the object's scale


class ShapePrior(NamedTuple):
    """Trained shape space on a canonical grid."""

    templates: np.ndarray
    """(1 + K, T, ..., T) float32: the mean SDF, then K unit modes."""
    sigma: np.ndarray
    """(K,) standard deviation of the training weights along each mode."""
    regression: np.ndarray
    """(K, ndim + 1): weights = regression @ [log(a / s), 1]."""
    extent: float

    @property
    def n_modes(self) -> int:
        return self.templates.shape[0] - 1

    @property
    def grid_size(self) -> int:
        return self.templates.shape[1]


def _ellipse_sdf(semi_axes: np.ndarray, grid_size: int, extent: float, supersample: int = 3) -> np.ndarray:
    """SDF (positive inside) of an axis-aligned ellipse on the canonical grid, by exact EDT
    of a supersampled mask (error below a third of a grid step)."""
    ndim = len(semi_axes)
    fine = (grid_size - 1) * supersample + 1
    step = 2 * extent / (fine - 1)
    axis = np.linspace(-extent, extent, fine)
    grids = np.meshgrid(*([axis] * ndim), indexing="ij")
    inside = sum((g / a) ** 2 for g, a in zip(grids, semi_axes)) <= 1.0
    sdf = ndi.distance_transform_edt(inside, sampling=step) - ndi.distance_transform_edt(~inside, sampling=step)
    sdf = sdf - np.where(inside, 0.5 * step, -0.5 * step)
    return sdf[(slice(None, None, supersample),) * ndim]


@functools.lru_cache(maxsize=2)
def train_shape_prior(ndim: int, *, n_training: int = N_TRAINING, axis_sigma: float = 0.15, seed: int = 0) -> ShapePrior:
    """Train the shape space from ``n_training`` Gaussian-varied ellipses (memoized, and kept on
    disk per machine by ``ivote._disk_cache``: the 3D training costs about a second).

    Examples
    --------
    >>> prior = train_shape_prior(2)
    >>> prior.templates.shape
    (3, 41, 41)
    """
    from .._disk_cache import cached_arrays

    key = dict(ndim=int(ndim), n_training=int(n_training), axis_sigma=float(axis_sigma), seed=int(seed))
    arrays = cached_arrays("shape_prior", key, __file__, lambda: _train(**key)._asdict())
    return ShapePrior(arrays["templates"], arrays["sigma"], arrays["regression"], float(arrays["extent"]))


def _train(ndim: int, n_training: int, axis_sigma: float, seed: int) -> ShapePrior:
    """The training of :func:`train_shape_prior`, uncached."""
    grid_size = 41 if ndim == 2 else 25
    rng = np.random.default_rng(seed)
    axes = np.clip(1.0 + axis_sigma * rng.normal(size=(n_training, ndim)), 0.55, 1.45)
    axes = np.sort(axes, axis=1)
    axes /= np.exp(np.log(axes).mean(axis=1, keepdims=True))  # unit geometric-mean radius
    supersample = 3 if ndim == 2 else 2
    sdfs = np.stack([_ellipse_sdf(a, grid_size, EXTENT, supersample).ravel() for a in axes])
    mean = sdfs.mean(axis=0)
    _, singular, modes = np.linalg.svd(sdfs - mean, full_matrices=False)
    k = ndim
    modes = modes[:k]
    weights = (sdfs - mean) @ modes.T  # (n_training, k)
    sigma = singular[:k] / np.sqrt(n_training - 1)
    features = np.concatenate([np.log(axes), np.ones((n_training, 1))], axis=1)
    regression, *_ = np.linalg.lstsq(features, weights, rcond=None)
    templates = np.concatenate([mean[None], modes]).reshape((k + 1,) + (grid_size,) * ndim)
    return ShapePrior(templates.astype(np.float32), sigma, regression.T.copy(), EXTENT)


def pose_size(ndim: int) -> int:
    """Length of one object's pose row: centre, rotation, scale, mode weights."""
    return ndim + ndim * ndim + 1 + ndim


def moment_features(box_shape, spacing, xp):
    """(cells, F) float64 matrix [1, x_j, x_j x_k (j <= k)] of box-centred physical
    coordinates; ``mask (N, cells) @ features`` gives every object's moments in one GEMM."""
    ndim = len(box_shape)
    axes = [(xp.arange(b, dtype=xp.float64) - (b - 1) / 2) * h for b, h in zip(box_shape, spacing)]
    grids = [g.ravel() for g in xp.meshgrid(*axes, indexing="ij")]
    columns = [xp.ones_like(grids[0])] + grids
    columns += [grids[j] * grids[k] for j in range(ndim) for k in range(j, ndim)]
    return xp.stack(columns, axis=1)


def fit_poses(inside, features, spacing, prior: ShapePrior, xp) -> "xp.ndarray":
    """Fit every object's pose, scale and mode weights to its mask.

    Parameters
    ----------
    inside : (N, *box) bool array
        Current object masks.
    features : array from :func:`moment_features`.
    spacing : tuple of float
        Normalised pixel size along each axis.

    Returns
    -------
    (N, P) float32 pose rows: centre (ndim, box-centred physical), rotation
    (ndim x ndim, row-major, columns the principal axes in ascending order),
    scale s (geometric-mean semi-axis), mode weights (K).
    """
    n = inside.shape[0]
    moments = inside.reshape(n, -1).astype(xp.float64) @ features
    return poses_from_moments(moments, spacing, prior, xp)


def poses_from_moments(moments, spacing, prior: ShapePrior, xp) -> "xp.ndarray":
    """The rest of :func:`fit_poses` from the masks' moments ``(N, 1 + ndim + ndim (ndim + 1) / 2)``
    float64, the sums over inside cells of ``[1, x_j, x_j x_k (j <= k)]`` (box-centred physical
    coordinates, the columns of :func:`moment_features`)."""
    n = moments.shape[0]
    ndim = len(spacing)
    mass = moments[:, 0]
    safe = xp.maximum(mass, 1.0)
    centre = moments[:, 1 : 1 + ndim] / safe[:, None]
    second = xp.zeros((n, ndim, ndim), dtype=xp.float64)
    col = 1 + ndim
    for j in range(ndim):
        for k in range(j, ndim):
            value = moments[:, col] / safe - centre[:, j] * centre[:, k]
            second[:, j, k] = value
            second[:, k, j] = value
            col += 1
    second += xp.asarray(np.diag(np.asarray(spacing, dtype=np.float64) ** 2 / 12.0))
    eigenvalues, rotation = xp.linalg.eigh(second)
    semi_axes = xp.sqrt((ndim + 2) * xp.maximum(eigenvalues, 1e-6))
    scale = xp.exp(xp.log(semi_axes).mean(axis=1))
    features_w = xp.concatenate([xp.log(semi_axes / scale[:, None]), xp.ones((n, 1))], axis=1)
    weights = features_w @ xp.asarray(prior.regression.T)
    bound = xp.asarray(2.0 * prior.sigma)
    weights = xp.clip(weights, -bound, bound)
    # a vanished object gets a tiny prior, so that the prior does not regrow it
    empty = mass < 1.0
    scale = xp.where(empty, 0.5 * min(spacing), scale)
    weights = xp.where(empty[:, None], 0.0, weights)
    pose = xp.concatenate(
        [centre, rotation.reshape(n, ndim * ndim), scale[:, None], weights], axis=1
    )
    return xp.ascontiguousarray(pose.astype(xp.float32))


def prior_sdf(pose, box_shape, spacing, prior: ShapePrior, xp):
    """Evaluate every object's fitted prior SDF on its box, (N, *box) float32.

    Multilinear interpolation of the templates with clamped grid coordinates,
    written out tap by tap exactly as the CUDA kernel does it.
    """
    ndim = len(box_shape)
    n = pose.shape[0]
    templates = xp.asarray(prior.templates)
    t = prior.grid_size
    inv_step = np.float32((t - 1) / (2 * prior.extent))
    centre = pose[:, :ndim]
    rotation = pose[:, ndim : ndim + ndim * ndim].reshape(n, ndim, ndim)
    scale = pose[:, ndim + ndim * ndim]
    weights = pose[:, ndim + ndim * ndim + 1 :]
    rel = []
    for axis in range(ndim):
        shape = [1] * (ndim + 1)
        shape[axis + 1] = box_shape[axis]
        coord = ((xp.arange(box_shape[axis], dtype=xp.float32) - np.float32((box_shape[axis] - 1) / 2))
                 * np.float32(spacing[axis])).reshape(shape)
        rel.append(coord - centre[:, axis].reshape((n,) + (1,) * ndim))
    bshape = (n,) + (1,) * ndim
    lower, frac = [], []
    for j in range(ndim):
        u = sum(rotation[:, i, j].reshape(bshape) * rel[i] for i in range(ndim)) / scale.reshape(bshape)
        g = xp.clip((u + np.float32(prior.extent)) * inv_step, np.float32(0), np.float32(t - 1))
        i0 = xp.minimum(xp.floor(g).astype(xp.int32), t - 2)
        lower.append(i0)
        frac.append(g - i0.astype(xp.float32))
    coeffs = [None] + [weights[:, k].reshape(bshape) for k in range(prior.n_modes)]
    flat = templates.reshape(templates.shape[0], -1)
    value = xp.zeros((n,) + tuple(box_shape), dtype=xp.float32)
    for corner in range(2**ndim):
        offset = 0
        tap_weight = xp.ones_like(value)
        for j in range(ndim):
            bit = (corner >> (ndim - 1 - j)) & 1
            offset = offset * t + (lower[j] + bit)
            tap_weight = tap_weight * (frac[j] if bit else (np.float32(1) - frac[j]))
        tap = flat[0][offset]
        for k in range(1, prior.n_modes + 1):
            tap = tap + coeffs[k] * flat[k][offset]
        value = value + tap_weight * tap
    return value * scale.reshape(bshape)
