"""One call for GUIs and scripts: learn features on an image and compute its maps (no Qt here)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .._backend import to_host
from ._convrbm import ConvRBM
from ._grayscale import as_grayscale

__all__ = ["LearnedFeatures", "NucleusFeatures", "as_grayscale", "default_patch_shape", "learn_features",
           "nucleus_filter_shape"]

N_FILTERS = 8
"""Filters of the recommended model: on gbm40, 16 and 32 detected no better and cost 2-4x the training time."""
FILTER_OVER_RADIUS = 0.5
"""Filter width / voting radius (0.75 x the typical nucleus radius; chosen on gbm40 among 0.4-1.0)."""
EPOCHS = 10
"""Training epochs of the recommended model (20 detected no better on gbm40)."""
MAX_TILES = 1024
"""Training tiles per epoch at most (a random draw each epoch): a 1000² image has about 840 of 36²; larger
images train no longer (their filters are the same kind), only the transform grows with the image."""
NUCLEUS_MAP_BLUR = 1 / 6
"""Pre-blur of the nucleus map / voting radius (a quarter of the typical radius; the best blur width on gbm40)."""
THREE_D_WARNING = (
    "learned features detected worse than the default blur in 3D (stardist3d F1 0.85 vs 0.96, qcanet3d level at "
    "1.00; docs/features.md): keep the blur (features=None) for volumes")
"""Warned by :meth:`NucleusFeatures.fit` on a 3D image."""
LEARNING_RATES = (1e-3, 3e-4, 1e-4)
"""Tried in turn: a Gaussian-ReLU RBM can diverge, then training restarts with a smaller step."""


@dataclass
class LearnedFeatures:
    """A fitted model and, on the host, its filters, feature maps and detection input."""

    model: ConvRBM
    filters: np.ndarray  # (n_filters, *filter_shape)
    feature_maps: np.ndarray  # (n_filters, *image.shape)
    detection_input: np.ndarray  # image.shape
    reconstruction_errors: list


def default_patch_shape(image_shape, filter_size: int, stride: int = 1):
    """Training tiles: about 4 filters wide (at least 32 pixels in 2D, 24 in 3D), never above the image."""
    low = 32 if len(image_shape) == 2 else 24
    side = max(low, 4 * int(filter_size), 4 * stride)
    return tuple(min(int(n), side) for n in image_shape)


def nucleus_filter_shape(radius, spacing=None) -> tuple[int, ...]:
    """Filter of the recommended model: odd, ``FILTER_OVER_RADIUS`` x the voting radius per axis (>= 3, 5 in-plane).

    ``radius`` is iterative voting's (the largest nucleus radius) in the units
    of ``spacing`` (pixels without one), a number or one per axis.
    """
    radius = np.broadcast_to(np.asarray(radius, dtype=float), (len(spacing),) if spacing is not None else (2,))
    spacing = np.ones(len(radius)) if spacing is None else np.asarray(spacing, dtype=float)
    if not (np.isfinite(radius).all() and (radius > 0).all() and (spacing > 0).all()):
        raise ValueError(f"radius and spacing must be positive numbers; got radius {radius}, spacing {spacing}")
    pixels = FILTER_OVER_RADIUS * radius / spacing
    low = np.where(pixels >= pixels.max() * 0.999, 5, 3)  # in-plane (finest) axes at least 5
    return tuple(int(max(lo, 2 * round((p - 1) / 2) + 1)) for p, lo in zip(pixels, low))


class NucleusFeatures:
    """The recommended learned detection input: a ConvRBM fitted on each image it is given.

    ``iterative_voting(image, radius=r, features=NucleusFeatures(r))`` fits
    :data:`N_FILTERS` filters of :func:`nucleus_filter_shape` (about half the
    voting radius) on tiles of the image itself for :data:`EPOCHS` epochs and
    votes on the model's reconstruction (:meth:`ConvRBM.detection_input`). No
    labels are used. Measured on H&E (``docs/features.md``): better than the
    default 2-pixel blur, level with a blur of the voting radius / 6 at the
    default threshold; on fluorescence keep the blur. On a 3D image
    :meth:`fit` warns (``UserWarning``): there it detected worse than the blur.

    Parameters
    ----------
    radius : float, optional
        Voting radius as given to ``iterative_voting`` (units of ``spacing``);
        ``None``: :func:`ivote.detect.estimate_radius` on each image.
    spacing : sequence of float, optional
        Pixel size per axis (as ``iterative_voting``'s).
    polarity : {'bright', 'dark'}
        Only used to estimate the radius of a grey image (RGB is read as H&E).
    seed : int
        Seed of the filters and the sampling.
    progress : callable, optional
        ``progress(epoch, n_epochs, error)`` (see :meth:`ConvRBM.fit`).
    source : {'reconstruction', 'nucleus_map'}
        The map voted on (:meth:`ConvRBM.detection_input`): the
        reconstruction with the default 2-pixel blur, or the hidden map most
        correlated with the image blurred by :data:`NUCLEUS_MAP_BLUR` x the
        voting radius. On gbm40 both are level with the best blur width at
        the default threshold; the nucleus map is ahead of it at a per-image
        best threshold (the slider): ``docs/features.md``.

    Attributes
    ----------
    model : ConvRBM or None
        The model fitted on the last image.

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.detect import iterative_voting
    >>> sample = synthetic_nuclei((64, 64), radius=5, seed=0)
    >>> found = iterative_voting(sample.image, radius=6, features=NucleusFeatures(6), backend="numpy")
    >>> len(found.points) > 0
    True
    """

    def __init__(self, radius=None, *, spacing=None, polarity="bright", seed=0, progress=None,
                 source="reconstruction"):
        if source not in ("reconstruction", "nucleus_map"):
            raise ValueError(f"source must be 'reconstruction' or 'nucleus_map'; got {source!r}")
        self.source = source
        self._radius_used = None
        self.radius = radius
        self.spacing = None if spacing is None else tuple(float(s) for s in spacing)
        self.polarity = polarity
        self.seed = int(seed)
        self.progress = progress
        self.model = None

    def fit(self, image) -> ConvRBM:
        """Fit the recommended model on ``image`` (RGB: its hematoxylin density); returns it."""
        rgb = getattr(image, "ndim", 0) == 3 and image.shape[-1] in (3, 4) and image.shape[0] > 4
        radius = self.radius
        if radius is None:
            from ..detect import estimate_radius

            radius = estimate_radius(image, spacing=self.spacing, polarity=self.polarity)
        self._radius_used = radius
        grey = as_grayscale(image, rgb)
        if grey.ndim == 3:
            warnings.warn(THREE_D_WARNING, UserWarning, stacklevel=2)
        spacing = self.spacing if self.spacing is not None and len(self.spacing) == grey.ndim else None
        shape = nucleus_filter_shape(radius, spacing if spacing is not None else (1.0,) * grey.ndim)
        patch = default_patch_shape(grey.shape, max(shape))
        for learning_rate in LEARNING_RATES:
            model = ConvRBM(N_FILTERS, shape, seed=self.seed)
            try:
                model.fit(grey, epochs=EPOCHS, patch_shape=patch, max_patches=MAX_TILES, learning_rate=learning_rate,
                          progress=self.progress)
            except FloatingPointError:  # diverged (TrainingDivergedError): a smaller step
                continue
            self.model = model
            return model
        raise FloatingPointError(f"ConvRBM training diverged at every learning rate down to {LEARNING_RATES[-1]:g}")

    def detection_input(self, image):
        """Fit on ``image`` and return the model's detection input (same shape, nuclei keep their polarity)."""
        model = self.fit(image)
        if self.source == "reconstruction":
            return model.detection_input(image)  # RGB: read as H&E there too
        # the blur in pixels of the finest axis (the filters' in-plane axes)
        radius_px = np.max(np.asarray(self._radius_used, dtype=float) / (
            np.asarray(self.spacing) if self.spacing is not None else 1.0))
        return model.detection_input(image, source="nucleus_map", blur=NUCLEUS_MAP_BLUR * float(radius_px))

    def __repr__(self):
        return (f"NucleusFeatures(radius={self.radius!r}, spacing={self.spacing!r}, seed={self.seed}, "
                f"source={self.source!r})")


def learn_features(image, *, n_filters=N_FILTERS, filter_size=9, stride=1, epochs=10, rgb=False, seed=0,
                   progress=None, **fit_options) -> LearnedFeatures:
    """Fit a :class:`ConvRBM` on tiles of ``image`` and compute its maps for the whole image.

    ``progress(epoch, n_epochs, error)`` is passed to :meth:`ConvRBM.fit` (raise to cancel).

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> image = synthetic_nuclei((48, 48), radius=5, seed=0).image
    >>> result = learn_features(image, n_filters=4, filter_size=5, epochs=2)
    >>> result.feature_maps.shape, result.detection_input.shape
    ((4, 48, 48), (48, 48))
    """
    image = as_grayscale(image, rgb)
    model = ConvRBM(n_filters, filter_size, stride=stride, seed=seed)
    fit_options.setdefault("patch_shape", default_patch_shape(image.shape, filter_size, stride))
    model.fit(image, epochs=epochs, progress=progress, **fit_options)
    return LearnedFeatures(
        model=model,
        filters=to_host(model.filters_),
        feature_maps=to_host(model.transform(image)),
        detection_input=to_host(model.detection_input(image)),
        reconstruction_errors=list(model.reconstruction_errors_),
    )
