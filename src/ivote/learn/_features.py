"""Features of every candidate (local maximum of the vote field) for the learned detector.

Each candidate is described by what the detector already knows of it (score,
contrast), by the shape of its vote peak, and by samples of the image on a
fixed stencil around it: a centre, rings at 0.25-1.25 radius, and central
differences on the rings at 0.5 and 0.75 radius (the gradient). Samples are
nearest-pixel reads, clipped at the image border, so the NumPy reference
(:func:`gather_reference`), the Numba loop (``_features_numba.gather``) and
CuPy (the reference's array code with ``xp = cupy``) read the same values;
everything after the reads is shared array code.

All lengths are in units of the voting radius and intensities in units of
the signal's range, so a model carries from one image of a set to the next;
the ``*_rel`` features are relative to the image's own candidates (its upper
half by score), which absorbs changes of stain strength and exposure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .._backend import get_array_module, to_host, use_numba
from ..errors import IvoteError

__all__ = ["FEATURES_GREY", "FEATURES_RGB", "CandidateFeatures", "candidate_features", "feature_names",
           "gather_reference"]

RINGS = (0.25, 0.5, 0.75, 1.0, 1.25)
"""Sampled radii, in units of the voting radius (the centre is sampled too)."""
_GRADIENT_RINGS = (0.5, 0.75)  # the nucleus edge: the voting radius is about 1.5 typical radii
_INNER = 0.5  # inside: the centre and the rings up to half the radius
_OUTER = (1.0, 1.25)  # the surrounding ring
_DIRECTIONS = {2: 16, 3: 26}  # samples per ring
_PATCH_FRACTION = 1 / 3  # half-width of the vote-peak patch, in radii
_LARGE_CONTRAST = 1e4  # inf (noiseless image) is clipped to this

FEATURES_GREY = (
    "log_score", "log_score_rel", "log_contrast", "log_contrast_rel",
    "peak_fraction", "peak_spread", "peak_elongation", "peak_offset",
    "centre", "inner", "ring", "inner_minus_ring", "inner_rel", "inner_minus_ring_rel", "inner_std", "ring_std",
    "size", "gradient_coherence", "gradient_inward",
    "neighbour_distance", "neighbour_log_ratio", "second_distance", "second_log_ratio", "border_distance",
    "original", "log_score_over_default", "log_contrast_over_default",
)
"""Features of a grey (or one-channel) image's candidates, in column order."""
FEATURES_RGB = FEATURES_GREY + (
    "eosin_inner", "eosin_ring", "eosin_inner_minus_ring", "eosin_inner_rel", "hematoxylin_minus_eosin",
)
"""Features of an H&E (RGB) image's candidates: the grey ones on the hematoxylin density, then eosin's."""


def feature_names(rgb: bool, n_maps: int = 0) -> tuple[str, ...]:
    """Column names for an RGB or grey image and ``n_maps`` feature maps (ConvRBM filters)."""
    maps = tuple(f"map{k}_{part}" for k in range(n_maps) for part in ("centre", "inner"))
    return (FEATURES_RGB if rgb else FEATURES_GREY) + maps


@dataclass(frozen=True)
class CandidateFeatures:
    """Features of every candidate of one image."""

    values: np.ndarray
    """(M, F) float32, rows in the order of ``Detections.candidates``."""
    names: tuple
    """F column names (:func:`feature_names`)."""

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class _Stencil:
    samples: np.ndarray
    """(K, ndim) int64 pixel offsets: the centre, then each ring's directions."""
    ring: np.ndarray
    """(K,) index into (0,) + RINGS of each sample."""
    gradient: np.ndarray
    """(G, 2 ndim, ndim) int64 offsets: per gradient sample, + and - a step along each axis."""
    gradient_at: np.ndarray
    """(G,) index into ``samples`` of each gradient sample."""
    outward: np.ndarray
    """(G, ndim) unit outward direction (physical) of each gradient sample."""
    step: np.ndarray
    """(ndim,) physical length of the difference's half-step per axis."""
    patch: np.ndarray
    """(P, ndim) int64 offsets of the vote-peak patch."""
    patch_physical: np.ndarray
    """(P, ndim) the patch offsets in units of the radius."""


def _directions(ndim: int) -> np.ndarray:
    """Unit directions, evenly spread: a circle's angles or a Fibonacci sphere."""
    n = _DIRECTIONS[ndim]
    if ndim == 2:
        angle = 2 * np.pi * np.arange(n) / n
        return np.stack([np.sin(angle), np.cos(angle)], axis=1)
    k = np.arange(n) + 0.5
    z = 1 - 2 * k / n
    phi = np.pi * (1 + 5 ** 0.5) * k
    rho = np.sqrt(1 - z**2)
    return np.stack([z, rho * np.sin(phi), rho * np.cos(phi)], axis=1)


@lru_cache(maxsize=32)
def _stencil(radius: float, spacing: tuple) -> _Stencil:
    ndim = len(spacing)
    scale = np.asarray(spacing, dtype=np.float64)
    directions = _directions(ndim)
    physical = [np.zeros((1, ndim))] + [f * radius * directions for f in RINGS]
    samples = np.rint(np.concatenate(physical) / scale).astype(np.int64)
    ring = np.concatenate([[0]] + [np.full(len(directions), i + 1) for i in range(len(RINGS))])
    gradient_at = np.flatnonzero(np.isin(ring, [RINGS.index(f) + 1 for f in _GRADIENT_RINGS]))
    step_px = np.maximum(1, np.rint(radius / 8 / scale)).astype(np.int64)
    eye = np.diag(step_px)
    plus_minus = np.concatenate([eye, -eye])  # (2 ndim, ndim)
    gradient = samples[gradient_at][:, None, :] + plus_minus[None]
    outward = directions[(gradient_at - 1) % len(directions)]
    half = np.maximum(1, np.rint(_PATCH_FRACTION * radius / scale)).astype(np.int64)
    grid = np.meshgrid(*[np.arange(-h, h + 1) for h in half], indexing="ij")
    patch = np.stack([g.ravel() for g in grid], axis=1).astype(np.int64)
    return _Stencil(samples, ring, gradient, gradient_at, outward, step_px * scale, patch, patch * scale / radius)


def gather_reference(array, points, offsets):
    """``array`` at ``points + offsets`` (nearest pixel, clipped to the array): (M, K) float64.

    ``points`` (M, ndim) and ``offsets`` (K, ndim) integer; ``array`` of ndim
    dimensions, NumPy or CuPy (the reads of the Numba loop, tested equal).
    """
    xp = get_array_module(array)
    shape = array.shape
    points, offsets = xp.asarray(points), xp.asarray(offsets)
    where = points[:, None, :] + offsets[None, :, :]
    index = tuple(xp.clip(where[..., axis], 0, shape[axis] - 1) for axis in range(array.ndim))
    return array[index].astype(xp.float64)


def _gather(array, points, offsets, compiled: bool):
    if compiled:
        from ._features_numba import gather

        return gather(np.ascontiguousarray(array), np.ascontiguousarray(points), np.ascontiguousarray(offsets))
    return gather_reference(array, points, offsets)


def candidate_features(image, detections, *, polarity: str = "bright", channel=None, stains=None,
                       maps=None, original=None, backend: str = "auto") -> CandidateFeatures:
    """Features of every candidate of ``detections`` (found on ``image`` with ``return_votes=True``).

    Parameters
    ----------
    image : array
        The image the detections were found on (grey 2D/3D or RGB), NumPy or CuPy.
    detections : Detections
        With a vote field (``iterative_voting(..., return_votes=True)``).
    polarity, channel, stains :
        As given to ``iterative_voting``.
    maps : array (C, *spatial) or (*spatial), or an object with ``transform(image)``, optional
        Feature maps (e.g. a :class:`ivote.features.ConvRBM`'s responses) sampled at
        each candidate's centre and inside half its radius.
    original : (M,) bool array, optional
        Which candidates are the detector's own maxima (the others were added by
        ``_candidates.widen``); default all.
    backend : {'auto', 'numpy', 'numba', 'cupy'}
        'numba' (the default on the CPU) reads the samples with a compiled loop,
        'numpy' with fancy indexing; both give the same values.

    Returns
    -------
    CandidateFeatures
    """
    from ..detect._colour import reads_as_rgb, rgb_full_scale, spatial_signal

    if detections.vote_field is None:
        raise IvoteError("candidate features need the vote field: detect with return_votes=True")
    xp = get_array_module(image)
    if xp is np:
        image = np.asarray(image)
    rgb = reads_as_rgb(image.shape)
    signal, from_rgb = spatial_signal(image, channel, xp, stains)
    sign = 1.0 if (polarity == "bright" or (from_rgb and channel is None)) else -1.0
    ndim = signal.ndim
    spacing = tuple(float(s) for s in detections.spacing)
    radius = float(detections.radius)
    stencil = _stencil(radius, spacing)
    compiled = xp is np and use_numba(np, "numpy" if backend == "numpy" else "auto")
    if maps is not None and hasattr(maps, "transform"):
        maps = maps.transform(image)
    n_maps = 0 if maps is None else (1 if maps.ndim == ndim else maps.shape[0])
    names = feature_names(rgb, n_maps)
    points_host = np.asarray(detections.candidates, dtype=np.int64).reshape(-1, ndim)
    m = len(points_host)
    if m == 0:
        return CandidateFeatures(np.zeros((0, len(names)), np.float32), names)
    points = points_host if xp is np else xp.asarray(points_host)

    low, high = float(signal.min()), float(signal.max())
    span = max(high - low, 1e-12)
    samples = _gather(signal, points, stencil.samples, compiled)
    diffs = _gather(signal, points, stencil.gradient.reshape(-1, ndim), compiled)
    votes = _gather(detections.vote_field, points, stencil.patch, compiled)
    columns = {}
    # intensities with nuclei bright, in units of the signal's range
    samples = (sign * (samples - low)) / span + (0.0 if sign > 0 else 1.0)
    ring = stencil.ring
    profile = xp.stack([samples[:, xp.asarray(ring == i)].mean(axis=1) for i in range(len(RINGS) + 1)], axis=1)
    inner_cols = xp.asarray(ring <= RINGS.index(_INNER) + 1)
    outer_cols = xp.asarray(np.isin(ring, [RINGS.index(f) + 1 for f in _OUTER]))
    columns["centre"] = profile[:, :2].mean(axis=1)
    columns["inner"] = samples[:, inner_cols].mean(axis=1)
    columns["ring"] = samples[:, outer_cols].mean(axis=1)
    columns["inner_minus_ring"] = columns["inner"] - columns["ring"]
    columns["inner_std"] = samples[:, inner_cols].std(axis=1)
    columns["ring_std"] = samples[:, outer_cols].std(axis=1)
    columns["size"] = _half_level_radius(profile, xp)
    # gradient on the rings: central differences, physical units, times the radius
    diffs = diffs.reshape(m, len(stencil.gradient_at), 2, ndim)
    gradient = sign * (diffs[:, :, 0, :] - diffs[:, :, 1, :]) / span  # (M, G, ndim): + minus - along each axis
    gradient = gradient / xp.asarray(2 * stencil.step)
    outward = xp.asarray(stencil.outward)
    inward = -(gradient * outward[None]).sum(axis=2) * radius
    magnitude = xp.sqrt((gradient**2).sum(axis=2)) * radius
    columns["gradient_coherence"] = (inward / xp.maximum(magnitude, 1e-12)).mean(axis=1)
    columns["gradient_inward"] = inward.mean(axis=1)
    columns.update(_peak_shape(votes, stencil, xp))
    if rgb:
        columns.update(_eosin(image, points, stencil, inner_cols, outer_cols, compiled, rgb_full_scale, xp))
        columns["hematoxylin_minus_eosin"] = columns["inner"] * span - columns["eosin_inner"]
    if n_maps:
        maps = maps if maps.ndim == ndim + 1 else maps[None]
        for k in range(n_maps):
            values = _gather(maps[k], points, stencil.samples[to_host(inner_cols)], compiled)
            columns[f"map{k}_centre"] = values[:, 0]
            columns[f"map{k}_inner"] = values.mean(axis=1)
    host = {key: to_host(value).astype(np.float64) for key, value in columns.items()}
    host.update(_detector_columns(detections, points_host, radius, spacing))
    own = np.ones(m, dtype=bool) if original is None else np.asarray(original, dtype=bool)
    host["original"] = own.astype(np.float64)
    host.update(_default_rule_columns(detections, own))
    upper = _upper_half(host["log_score"])
    host["log_score_rel"] = host["log_score"] - np.median(host["log_score"][upper])
    host["log_contrast_rel"] = host["log_contrast"] - np.median(host["log_contrast"][upper])
    for key in ("inner", "inner_minus_ring") + (("eosin_inner",) if rgb else ()):
        host[f"{key}_rel"] = _relative(host[key], upper)
    values = np.stack([host[name] for name in names], axis=1).astype(np.float32)
    return CandidateFeatures(values, names)


def _half_level_radius(profile, xp):
    """Where the radial profile first falls below half-way from the centre to the outermost ring,
    linearly interpolated, in radii (1.5 when it never does)."""
    radii = np.array((0.0,) + RINGS)
    level = (profile[:, 0] + profile[:, -1]) / 2
    size = xp.full(profile.shape[0], 1.5)
    found = xp.zeros(profile.shape[0], dtype=bool)
    for i in range(1, profile.shape[1]):
        before, after = profile[:, i - 1], profile[:, i]
        crossing = ~found & (after < level)
        weight = xp.clip((before - level) / xp.maximum(before - after, 1e-12), 0.0, 1.0)
        size = xp.where(crossing, radii[i - 1] + weight * (radii[i] - radii[i - 1]), size)
        found |= crossing
    return size


def _peak_shape(votes, stencil, xp) -> dict:
    """The vote peak's share of its patch, spread and elongation (vote-weighted second moments, in radii²)
    and how far its centre of mass lies from the maximum."""
    weights = xp.maximum(votes, 0.0)
    total = xp.maximum(weights.sum(axis=1, keepdims=True), 1e-12)
    weights = weights / total
    centre_index = int(np.flatnonzero((stencil.patch == 0).all(axis=1))[0])
    offsets = xp.asarray(stencil.patch_physical)
    mean = weights @ offsets  # (M, ndim)
    centred = offsets[None, :, :] - mean[:, None, :]
    cov = to_host(xp.einsum("mp,mpi,mpj->mij", weights, centred, centred))
    eig = np.linalg.eigvalsh(cov)  # (M, ndim, ndim) is small: on the host, alike on every backend
    return {
        "peak_fraction": weights[:, centre_index],
        "peak_spread": np.trace(cov, axis1=1, axis2=2),
        "peak_elongation": 1.0 - eig[:, 0] / np.maximum(eig[:, -1], 1e-12),
        "peak_offset": xp.sqrt((mean**2).sum(axis=1)),
    }


def _eosin(image, points, stencil, inner_cols, outer_cols, compiled, rgb_full_scale, xp) -> dict:
    """Eosin density (Ruifrok's vectors, as ``skimage.color.rgb2hed``) inside and around each candidate."""
    from skimage.color import hed_from_rgb

    full = 255.0 if image.dtype == np.uint8 else rgb_full_scale(image[..., :3])
    offsets = stencil.samples
    optical = []
    for c in range(3):
        unit = _gather(image[..., c], points, offsets, compiled) / full
        optical.append(xp.log(xp.maximum(unit, 1e-6)) / math.log(1e-6))
    e0, e1, e2 = (float(v) for v in hed_from_rgb[:, 1])
    eosin = xp.maximum(optical[0] * e0 + optical[1] * e1 + optical[2] * e2, 0.0)
    inner, ring = eosin[:, inner_cols].mean(axis=1), eosin[:, outer_cols].mean(axis=1)
    return {"eosin_inner": inner, "eosin_ring": ring, "eosin_inner_minus_ring": inner - ring}


def _detector_columns(detections, points, radius, spacing) -> dict:
    """Score, contrast, the nearest candidates and the border (host arrays)."""
    from scipy.spatial import cKDTree

    scores = np.maximum(np.asarray(detections.candidate_scores, dtype=np.float64), 1e-12)
    contrasts = np.asarray(detections.candidate_contrasts, dtype=np.float64)
    contrasts = np.where(np.isfinite(contrasts), contrasts, _LARGE_CONTRAST)
    columns = {"log_score": np.log(scores), "log_contrast": np.log1p(np.clip(contrasts, 0.0, _LARGE_CONTRAST))}
    physical = points * np.asarray(spacing)
    m = len(points)
    far = 4.0  # distances are capped at 4 radii (and score ratios then 0)
    if m > 1:
        k = min(3, m)
        distance, index = cKDTree(physical).query(physical, k=k)
        distance = np.where(np.isfinite(distance), distance, far * radius)
        index = np.where(index < m, index, 0)
    else:
        distance, index = np.full((m, 3), far * radius), np.zeros((m, 3), dtype=np.int64)
    for j, name in ((1, "neighbour"), (2, "second")):
        if distance.shape[1] > j:
            d = np.minimum(distance[:, j] / radius, far)
            ratio = np.where(d < far, np.log(scores) - np.log(scores[index[:, j]]), 0.0)
        else:
            d, ratio = np.full(m, far), np.zeros(m)
        columns[f"{name}_distance"], columns[f"{name}_log_ratio"] = d, ratio
    shape = np.asarray(detections.vote_field.shape)
    border = np.minimum(points, shape - 1 - points) * np.asarray(spacing)
    columns["border_distance"] = np.minimum(border.min(axis=1) / radius, 2.0)
    return columns


def _default_rule_columns(detections, own) -> dict:
    """Score and contrast against the default rule's threshold and floor on this image
    (``auto_threshold`` of the detector's own candidates): the rule adapts to each image, so
    these carry from image to image where the raw values shift."""
    from ..detect._thresholds import _DEFAULT_MIN_CONTRAST, auto_threshold

    scores = np.maximum(np.asarray(detections.candidate_scores, dtype=np.float64), 1e-12)
    contrasts = np.asarray(detections.candidate_contrasts, dtype=np.float64)
    value, floor = auto_threshold(scores[own], contrasts[own], _DEFAULT_MIN_CONTRAST)
    value = value if np.isfinite(value) and value > 0 else float(np.min(scores))
    contrasts = np.where(np.isfinite(contrasts), contrasts, _LARGE_CONTRAST)
    return {"log_score_over_default": np.log(scores) - np.log(value),
            "log_contrast_over_default": np.log1p(np.clip(contrasts, 0.0, _LARGE_CONTRAST)) - np.log1p(floor)}


def _upper_half(log_scores) -> np.ndarray:
    """The candidates scoring at least the median: the image's reference for the relative features."""
    return log_scores >= np.median(log_scores)


def _relative(values, upper) -> np.ndarray:
    """``values`` against the image's upper-half median, in units of their interquartile range."""
    q1, q3 = np.percentile(values, [25, 75])
    return (values - np.median(values[upper])) / max(q3 - q1, 1e-6)
