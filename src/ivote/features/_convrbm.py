"""Convolutional RBM trained in the frequency domain (Brosch & Tam 2015).

Model (one input channel, ``n_filters`` hidden maps, stride ``s``)::

    mu_k[n]  = sum_m w_k[m] v[s n - s r + m] + c_k            (hidden pre-activation)
    h_k      = max(0, mu_k + N(0, sigm(mu_k)))                  (noisy ReLU)
    E[v | h] = sum_k sum_n h_k[n] w_k[x - s n + s r] + b        (Gaussian visible, unit variance)

with zero boundaries (visible and hidden units exist only inside the image), so
the hidden and visible passes are exact transposes of each other. Training
uses one of two hidden extents (``hidden_extent``):

* ``'valid'`` (default; Lee et al. 2009, Brosch & Tam 2015): ``r = 0``, a hidden
  unit wherever the whole filter lies inside the image. Then the hidden pass,
  the reconstruction and the weight statistics need no padding: filters
  zero-padded to the image's own size give them exactly (the thesis' method).
* ``'same'``: ``r`` centres the filters, a hidden unit on every (stride) pixel;
  the FFT shape must then hold ``image/s + filter/s`` per axis.

:meth:`ConvRBM.transform` and :meth:`ConvRBM.reconstruct` always use the
``'same'`` extent, so feature maps have the input's size.

Training keeps images and filters as spectra of one FFT shape of the form
``2**a 3**b 5**c`` (or a faster nearby length, timed per GPU). A stride ``s``
becomes stride 1 after space-to-depth (``s**ndim`` channels). Only the nonlinearity, the noise, the masks and the
biases are applied in the spatial domain: four batched FFTs of ``n_filters``
maps per image and CD-1 step. Gradients are summed as spectra over a
mini-batch and cut back to the filter size once per mini-batch.

The module is over 600 lines because it is one class: training, the transform, the
detection input, the memory estimate and the file round trip all read the same fitted
arrays and per-shape geometry, and a class split across modules would scatter one
model's state. What stands apart lives apart: the sizes of one image shape
(``_convrbm_geometry.py``), the model file's format and checks (``_convrbm_file.py``),
the spectral products (``_spectral.py``).
"""

from __future__ import annotations

import math
import os
from numbers import Integral
from pathlib import Path
from typing import Any, BinaryIO, Sequence

import numpy as np

from .._backend import default_xp, gpu_memory_guard, ndimage_module, to_device, to_host
from .._typing import Array, ArrayLike, Callback
from .._validate import check_image, check_positive
from ..errors import IvoteError, TrainingDivergedError
from ._convrbm_file import read_model, write_model
from ._convrbm_geometry import _Geometry
from ._grayscale import as_grayscale
from ._space_to_depth import depth_to_space, space_to_depth
from ._spectral import (accumulate_gradient, cropped_irfftn, fastest_fft_shape, hidden_spectrum, irfftn, noisy_relu,
                        rfftn, taps_rfftn, visible_spectrum)

__all__ = ["ConvRBM"]

_DETECTION_SOURCES = ("reconstruction", "nucleus_map", "principal_component")


def _standardise(image, xp, dtype):
    peak = max(abs(float(image.min())), abs(float(image.max()))) if image.size else 0.0  # no copy of the image
    if peak > 1e30 or 0 < peak < 1e-30:  # float32 (and squares in float64) would overflow or underflow
        standardised, mean, std = _standardise(xp.asarray(image, dtype=np.float64) / peak, xp, dtype)
        return standardised, mean * peak, std * peak
    image = xp.asarray(image, dtype=dtype)
    std = float(image.std())
    mean = float(image.mean())
    return (image - mean) / (std if std > 0 else 1.0), mean, std if std > 0 else 1.0


class ConvRBM:
    """Convolutional restricted Boltzmann machine, 2D or 3D, trained in the frequency domain.

    Gaussian visible units (the input standardised per image to zero mean and
    unit variance), noisy rectified linear hidden units, contrastive divergence
    (CD-1) with momentum and weight decay. Strides 1, 2 and 4 are trained as
    stride-1 convolutions after space-to-depth.

    Parameters
    ----------
    n_filters : int
        Number of filters (hidden feature maps).
    filter_shape : int or tuple of int
        Filter size in pixels; an int is used along every axis (the number of
        axes is then taken from the first image).
    stride : int
        Hidden units sit on a grid ``stride`` pixels apart: 1, 2 or 4.
    seed : int
        Seed of the filter initialisation and of the sampling noise.
    dtype : float32 or float64
        Precision of parameters and spectra (float32 is fast on GPUs).
    xp : module, optional
        ``numpy`` or ``cupy``; default: the backend of :func:`ivote._backend.default_xp`.
    init_scale : float
        Standard deviation of the initial filter weights.
    hidden_extent : {'valid', 'same'}
        Hidden units during training: only where the filter lies wholly inside
        the image (``'valid'``, the thesis' formulation: FFTs at the image's
        own size, e.g. 128³ instead of 144³ for 9³ filters) or on every pixel
        with a zero boundary (``'same'``). Feature maps (:meth:`transform`) are
        always computed at the input's size.

    Attributes
    ----------
    filters_ : ndarray, shape (n_filters, *filter_shape)
    hidden_bias_ : ndarray, shape (n_filters,)
    visible_bias_ : float
    reconstruction_errors_ : list of float
        Mean squared reconstruction error (standardised units) of each epoch.

    References
    ----------
    .. [1] T. Brosch and R. Tam, "Efficient training of convolutional deep belief
       networks in the frequency domain for application to high-resolution 2D
       and 3D images", Neural Computation 27(1), 211-227, 2015.
       :doi:`10.1162/NECO_a_00682`
    .. [2] V. Nair and G. E. Hinton, "Rectified linear units improve restricted
       Boltzmann machines", ICML 2010.

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.features import ConvRBM
    >>> image = synthetic_nuclei((48, 48), radius=6, seed=1).image
    >>> model = ConvRBM(4, 5, stride=2, xp=np).fit(image, epochs=2)
    >>> model.transform(image).shape
    (4, 48, 48)
    """

    def __init__(self, n_filters: int, filter_shape: int | Sequence[int], *, stride: int = 1, seed: int = 0,
                 dtype: Any = np.float32, xp: Any = None, init_scale: float = 0.01, hidden_extent: str = "valid"):
        if not isinstance(n_filters, Integral) or n_filters < 1:
            raise ValueError(f"n_filters must be an integer >= 1; got {n_filters!r}")
        if isinstance(filter_shape, Integral):
            filter_shape = int(filter_shape)
            sizes = (filter_shape,)
        else:
            try:
                filter_shape = tuple(int(k) for k in filter_shape)
            except (TypeError, ValueError):
                raise IvoteError(f"filter_shape must be an int or 2 or 3 ints; got {filter_shape!r}") from None
            sizes = filter_shape
            if len(filter_shape) not in (2, 3):
                raise ValueError(f"filter_shape must be an int or have 2 or 3 sizes; got {filter_shape!r}")
        if any(k < 1 for k in sizes):
            raise ValueError(f"filter_shape must be >= 1 along every axis; got {filter_shape!r}")
        if stride not in (1, 2, 4):
            raise ValueError(f"stride must be 1, 2 or 4; got {stride!r}")
        if hidden_extent not in ("valid", "same"):
            raise ValueError(f"hidden_extent must be 'valid' or 'same'; got {hidden_extent!r}")
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64; got {dtype}")
        self.n_filters = int(n_filters)
        self.stride = int(stride)
        self.seed = int(seed)
        self.dtype = dtype
        self.init_scale = check_positive(init_scale, "init_scale")
        self.hidden_extent = hidden_extent
        self.xp = default_xp() if xp is None else xp
        self._filter_shape = filter_shape
        self.filters_ = None
        self.hidden_bias_ = None
        self.visible_bias_ = 0.0
        self.reconstruction_errors_ = []
        self._rng = np.random.default_rng(self.seed + 2)
        self._geometries = {}

    # ------------------------------------------------------------------ setup

    @property
    def filter_shape(self) -> tuple:
        """Filter size in pixels along each axis (known once the number of axes is)."""
        if isinstance(self._filter_shape, int):
            if self.filters_ is None:
                raise AttributeError("filter_shape is given as an int; fit the model to learn the number of axes")
            return (self._filter_shape,) * (self.filters_.ndim - 1)
        return self._filter_shape

    @property
    def ndim(self) -> int | None:
        if self.filters_ is not None:
            return self.filters_.ndim - 1
        return None if isinstance(self._filter_shape, int) else len(self._filter_shape)

    def _initialise(self, ndim):
        shape = self._filter_shape if not isinstance(self._filter_shape, int) else (self._filter_shape,) * ndim
        rng = np.random.default_rng(self.seed)
        filters = rng.normal(0.0, self.init_scale, size=(self.n_filters,) + tuple(shape))
        self.filters_ = self.xp.asarray(filters, dtype=self.dtype)
        self.hidden_bias_ = self.xp.zeros(self.n_filters, dtype=self.dtype)
        self.visible_bias_ = 0.0

    def _geometry(self, shape, extent=None):
        """Geometry of an image shape; ``extent`` defaults to the training extent (``hidden_extent``)."""
        key = (tuple(shape), extent or self.hidden_extent)
        geometry = self._geometries.get(key)
        if geometry is None:
            geometry = _Geometry.of(key[0], self.stride, self.filter_shape,
                                    lambda minimum: fastest_fft_shape(minimum, self.n_filters, self.dtype, self.xp),
                                    extent=key[1])
            self._geometries[key] = geometry
        return geometry

    def _check(self, image, name="image"):
        image = check_image(image, name=name)
        if self.ndim is not None and image.ndim != self.ndim:
            raise ValueError(f"{name} must be {self.ndim}D like the filters; got shape {image.shape}")
        return image

    # --------------------------------------------------- spatial <-> spectral

    def _visible_blocks(self, standardised, geometry):
        """Pixel image -> depth-domain visible units ``(n_channels, *blocks)`` (zero padded)."""
        xp = self.xp
        s = geometry.stride
        padded_shape = tuple(b * s for b in geometry.blocks)
        if padded_shape != standardised.shape:
            padded = xp.zeros(padded_shape, dtype=self.dtype)
            padded[tuple(slice(0, n) for n in standardised.shape)] = standardised
            standardised = padded
        return xp.ascontiguousarray(space_to_depth(standardised, s, geometry.ndim))

    def _visible_mask(self, geometry):
        """1 where a depth-domain visible unit is a real pixel, 0 in the padding (cached)."""
        key = ("mask", geometry.shape)
        mask = self._geometries.get(key)
        if mask is None:
            ones = self.xp.ones(geometry.shape, dtype=self.dtype)
            mask = self._visible_blocks(ones, geometry)
            self._geometries[key] = mask
        return mask

    def _pixels(self, blocks, geometry):
        """Depth-domain visible ``(n_channels, *blocks)`` -> pixel image cropped to the input shape."""
        image = depth_to_space(blocks, geometry.stride, geometry.ndim)
        return image[tuple(slice(0, n) for n in geometry.shape)]

    def _filter_spectra(self, geometry):
        """Filters padded to the FFT shape, centred on the origin, as spectra ``(n_filters, n_channels, *freq)``.

        A pruned DFT of the taps (:func:`taps_rfftn`): the same numbers as the
        FFT of the zero-padded filters, without filling and transforming the
        padded volume.
        """
        xp = self.xp
        s, ndim = geometry.stride, geometry.ndim
        padded = xp.zeros((self.n_filters,) + tuple(k * s for k in geometry.filter_blocks), dtype=self.dtype)
        padded[(slice(None),) + tuple(slice(0, k) for k in geometry.filter_shape)] = self.filters_
        blocks = xp.ascontiguousarray(space_to_depth(padded, s, ndim))
        return taps_rfftn(blocks, self._tap_positions(geometry), geometry.fft_shape, xp)

    @staticmethod
    def _tap_positions(geometry):
        """Per axis, where filter tap m sits in the FFT volume: (m - r) mod P, so hidden unit n sees v[n + m - r]."""
        return [(np.arange(k) - r) % p for k, r, p in zip(geometry.filter_blocks, geometry.centre, geometry.fft_shape)]

    def _filter_gradient(self, gradient_spectrum, geometry):
        """Summed CD statistics (spectra) -> gradient of the pixel-domain filters (crop once per mini-batch).

        The inverse FFT is evaluated at the filter taps only (:func:`cropped_irfftn`).
        """
        blocks = cropped_irfftn(gradient_spectrum, self._tap_positions(geometry), geometry.fft_shape, self.xp)
        pixels = depth_to_space(blocks, geometry.stride, geometry.ndim)
        return pixels[(slice(None),) + tuple(slice(0, k) for k in geometry.filter_shape)]

    # ----------------------------------------------------------- the passes

    def _hidden(self, visible_spec, filter_spec, geometry, noise):
        """Hidden units in the spatial domain, ``(n_filters, *fft_shape)``, zero outside the hidden extent."""
        # the inverse FFT's 1 / N rides on the spectral product (no extra pass over the maps)
        scale = 1.0 / math.prod(geometry.fft_shape)
        pre_activation = irfftn(hidden_spectrum(filter_spec, visible_spec, self.xp, scale=scale), geometry.fft_shape,
                                self.xp, overwrite=True, normalise=False)
        return noisy_relu(pre_activation, self.hidden_bias_, geometry.hidden, noise, self.xp)

    def _visible(self, hidden_spec, filter_spec, geometry):
        """Mean of the Gaussian visible units given hidden spectra, ``(n_channels, *fft_shape)``."""
        xp = self.xp
        scale = 1.0 / math.prod(geometry.fft_shape)
        spatial = irfftn(visible_spectrum(filter_spec, hidden_spec, xp, scale=scale), geometry.fft_shape, xp,
                         overwrite=True, normalise=False)
        inside = (slice(None),) + tuple(slice(0, b) for b in geometry.blocks)
        visible = xp.zeros_like(spatial)
        visible[inside] = (spatial[inside] + self.dtype.type(self.visible_bias_)) * self._visible_mask(geometry)
        return visible

    def _cd1(self, visible_blocks, geometry, filter_spec, gradient_spec, noise):
        """One CD-1 step on one image; adds its statistics to ``gradient_spec``.

        Returns ``(v0, h0, v1, h1)`` in the spatial domain (padded FFT shape) and the
        sums needed for the bias gradients and the reconstruction error. The
        positive phase uses the sampled ``h0`` (the same spectrum drives the
        reconstruction), the negative phase the expectation of ``h1``: four
        batched FFTs of ``n_filters`` maps.
        """
        xp = self.xp
        v0_spec = rfftn(visible_blocks, geometry.fft_shape, xp)  # zero-pads to the FFT shape
        h0 = self._hidden(v0_spec, filter_spec, geometry, noise)
        h0_spec = rfftn(h0, geometry.fft_shape, xp)
        v1 = self._visible(h0_spec, filter_spec, geometry)
        v1_spec = rfftn(v1, geometry.fft_shape, xp)
        h1 = self._hidden(v1_spec, filter_spec, geometry, None)
        h1_spec = rfftn(h1, geometry.fft_shape, xp)
        accumulate_gradient(gradient_spec, h0_spec, v0_spec, h1_spec, v1_spec, xp)
        # bias statistics are the zero-frequency terms of the spectra
        zero = (slice(None),) + (0,) * geometry.ndim
        visible_stat = (v0_spec[zero].real - v1_spec[zero].real).sum()
        hidden_stat = h0_spec[zero].real - h1_spec[zero].real
        inside = tuple(slice(0, b) for b in geometry.blocks)
        error = ((visible_blocks - v1[(slice(None),) + inside]) ** 2).sum()
        return h0, v1, h1, visible_stat, hidden_stat, error

    def _noise(self, geometry):
        """Standard normal noise for h0: an array on NumPy, a fresh seed on CuPy (the kernel hashes it)."""
        if self.xp is np:
            return self._rng.standard_normal((self.n_filters,) + geometry.fft_shape, dtype=self.dtype)
        return int(self._rng.integers(0, 2**63 - 1))

    # ---------------------------------------------------------------- public

    @gpu_memory_guard("ConvRBM")
    def fit(self, images: ArrayLike | Array | Sequence[ArrayLike | Array], *, epochs: int = 10, batch_size: int = 8,
            learning_rate: float = 1e-3, momentum: float = 0.5, weight_decay: float = 1e-4,
            patch_shape: Sequence[int] | None = None, max_patches: int | None = None,
            progress: Callback = None) -> "ConvRBM":
        """Train by CD-1 with momentum and weight decay.

        Parameters
        ----------
        images : ndarray or sequence of ndarray
            One 2D/3D image or several (shapes may differ; all with the filters'
            number of axes). Each is standardised to zero mean, unit variance.
        epochs : int
            Passes over the training images (or patches).
        batch_size : int
            Images (or patches) per mini-batch; statistics are summed over a
            mini-batch one image at a time, so memory does not grow with it.
        learning_rate, momentum, weight_decay : float
            ``velocity = momentum * velocity + learning_rate * (grad - weight_decay * W)``.
        patch_shape : tuple of int, optional
            Train on tiles of this shape cut from each image on a grid with a
            random offset every epoch (more, smaller updates from few images).
        max_patches : int, optional
            Train each epoch on at most this many of the images or tiles, a
            fresh random draw every epoch (bounds the time on large images).
        progress : callable, optional
            ``progress(epoch, n_epochs, reconstruction_error)`` after each epoch;
            an exception raised by it stops training (the model keeps the
            parameters of the last finished mini-batch).

        Returns
        -------
        self
        """
        xp = self.xp
        if isinstance(images, (list, tuple)):
            images = list(images)
        else:
            images = [images]
        if not images:
            raise ValueError("images must hold at least one image")
        if not isinstance(epochs, Integral) or epochs < 1:
            raise ValueError(f"epochs must be an integer >= 1; got {epochs!r}")
        if not isinstance(batch_size, Integral) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        if max_patches is not None and (not isinstance(max_patches, Integral) or max_patches < 1):
            raise ValueError(f"max_patches must be an integer >= 1 or None; got {max_patches!r}")
        learning_rate = check_positive(learning_rate, "learning_rate")
        momentum = check_positive(momentum, "momentum", upper=0.999, allow_zero=True)
        weight_decay = check_positive(weight_decay, "weight_decay", allow_zero=True)
        standardised = []
        for i, image in enumerate(images):
            image = self._check(image, name=f"images[{i}]")
            if self.filters_ is None:
                self._initialise(image.ndim)
            standardised.append(_standardise(to_device(image, xp), xp, self.dtype)[0])
        if patch_shape is not None:
            try:
                patch_shape = tuple(int(p) for p in patch_shape)
            except (TypeError, ValueError):
                raise IvoteError(
                    f"patch_shape must have {self.ndim} positive integer sizes; got {patch_shape!r}") from None
            if len(patch_shape) != self.ndim or any(p < 1 for p in patch_shape):
                raise ValueError(f"patch_shape must have {self.ndim} positive sizes; got {patch_shape!r}")
        for shape in {tuple(min(p, n) for p, n in zip(patch_shape or x.shape, x.shape)) for x in standardised}:
            self._check_memory(shape, self.hidden_extent)
        sample_rng = np.random.default_rng(self.seed + 1)
        velocity_w = xp.zeros_like(self.filters_)
        velocity_c = xp.zeros_like(self.hidden_bias_)
        velocity_b = 0.0
        for epoch in range(epochs):
            samples = self._samples(standardised, patch_shape, sample_rng)
            order = sample_rng.permutation(len(samples))[:max_patches]
            total_error, total_units = 0.0, 0
            for start in range(0, len(order), batch_size):
                batch = [samples[i] for i in order[start : start + batch_size]]
                with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported after the epoch
                    grad_w, grad_c, grad_b, error, units = self._batch_gradient(batch)
                total_error += error
                total_units += units
                velocity_w = momentum * velocity_w + learning_rate * (grad_w - weight_decay * self.filters_)
                velocity_c = momentum * velocity_c + learning_rate * grad_c
                velocity_b = momentum * velocity_b + learning_rate * grad_b
                self.filters_ = (self.filters_ + velocity_w).astype(self.dtype, copy=False)
                self.hidden_bias_ = (self.hidden_bias_ + velocity_c).astype(self.dtype, copy=False)
                self.visible_bias_ = float(self.visible_bias_ + velocity_b)
            error = total_error / max(total_units, 1)
            if not math.isfinite(error) or not bool(xp.isfinite(self.filters_).all()):
                raise TrainingDivergedError(
                    f"training diverged in epoch {epoch + 1} (reconstruction error {error}); "
                    f"lower learning_rate (now {learning_rate:g}) or momentum (now {momentum:g})"
                )
            self.reconstruction_errors_.append(error)
            if progress is not None:
                progress(epoch + 1, epochs, error)
        return self

    def _samples(self, standardised, patch_shape, rng):
        if patch_shape is None:
            return standardised
        samples = []
        for image in standardised:
            shape = tuple(min(p, n) for p, n in zip(patch_shape, image.shape))
            starts = []
            for p, n in zip(shape, image.shape):
                # a grid of tiles covering the axis, shifted by a random offset (clipped at the ends)
                offset = int(rng.integers(0, p)) if n > p else 0
                count = -(-n // p) + (offset > 0)
                starts.append(sorted({min(max(i * p - offset, 0), n - p) for i in range(count)}))
            for corner in np.stack(np.meshgrid(*starts, indexing="ij"), -1).reshape(-1, len(shape)):
                samples.append(image[tuple(slice(c, c + p) for c, p in zip(corner, shape))])
        return samples

    def _batch_gradient(self, batch):
        """Gradients (filters, hidden bias, visible bias) averaged over a mini-batch."""
        xp = self.xp
        by_geometry = {}
        # sums stay on the device: no host synchronisation inside a mini-batch
        grad_c = xp.zeros(self.n_filters, dtype=np.float64)
        grad_b = xp.zeros((), dtype=np.float64)
        error = xp.zeros((), dtype=np.float64)
        units = 0
        for sample in batch:
            geometry = self._geometry(sample.shape)
            if geometry not in by_geometry:
                spec = self._filter_spectra(geometry)
                by_geometry[geometry] = (spec, xp.zeros_like(spec))
            filter_spec, gradient_spec = by_geometry[geometry]
            n_hidden = math.prod(geometry.hidden)
            _, _, _, visible_stat, hidden_stat, sq_error = self._cd1(
                self._visible_blocks(sample, geometry), geometry, filter_spec, gradient_spec, self._noise(geometry)
            )
            # the spectra's scaling: their zero frequency is the plain sum
            grad_c += hidden_stat / n_hidden
            grad_b += visible_stat / sample.size
            error += sq_error
            units += sample.size
        grad_w = xp.zeros_like(self.filters_)
        count = len(batch)
        for geometry, (_, gradient_spec) in by_geometry.items():
            n_hidden = math.prod(geometry.hidden)
            # Parseval: the inverse FFT of conj(H) V is the spatial correlation
            grad_w += self._filter_gradient(gradient_spec, geometry) / n_hidden
        # images of different shapes each weigh as one sample
        return grad_w / count, (grad_c / count).astype(self.dtype), float(grad_b) / count, float(error), units

    def _hidden_maps(self, image):
        """Hidden expectations on the stride grid, ``(n_filters, *blocks)``, and the geometry."""
        xp = self.xp
        image = to_device(self._check(image), xp)
        if self.filters_ is None:
            raise RuntimeError("the model is not fitted yet: call fit() or ConvRBM.load()")
        self._check_memory(image.shape, "same")
        standardised, mean, std = _standardise(image, xp, self.dtype)
        geometry = self._geometry(standardised.shape, "same")
        visible_spec = rfftn(self._visible_blocks(standardised, geometry), geometry.fft_shape, xp)
        hidden = self._hidden(visible_spec, self._filter_spectra(geometry), geometry, None)
        return hidden[(slice(None),) + tuple(slice(0, b) for b in geometry.hidden)], geometry, (mean, std)

    def hidden_grid(self, image: ArrayLike | Array) -> Array:
        """Hidden expectations ``max(0, mu)`` on the stride grid, ``(n_filters, *ceil(shape / stride))``."""
        return self._hidden_maps(image)[0]

    @gpu_memory_guard("ConvRBM")
    def transform(self, image: ArrayLike | Array) -> Array:
        """Hidden expectations at the input's size, ``(n_filters, *image.shape)``.

        With stride > 1 each hidden unit is repeated over the pixels nearest to
        the centre of its receptive field (nearest-neighbour upsampling).
        """
        hidden, geometry, _ = self._hidden_maps(image)
        if geometry.stride == 1:
            return hidden
        xp = self.xp
        s = geometry.stride
        index = []
        for n, k, r, b in zip(geometry.shape, geometry.filter_shape, geometry.centre, geometry.blocks):
            # hidden unit j is centred on pixel s (j - r) + (k - 1) / 2
            nearest = xp.floor((xp.arange(n) - (k - 1) / 2) / s + r + 0.5).astype(np.int64)
            index.append(xp.clip(nearest, 0, b - 1))
        return hidden[(slice(None),) + xp.ix_(*index)]

    @gpu_memory_guard("ConvRBM")
    def reconstruct(self, image: ArrayLike | Array) -> Array:
        """Mean of the visible units given the hidden expectations, in the image's units."""
        standardised, (mean, std) = self._reconstruct_standardised(image)
        return standardised * std + mean

    def _reconstruct_standardised(self, image):
        """The reconstruction in the standardised units the model works in, and the
        (mean, std) that bring it back to the image's units."""
        xp = self.xp
        hidden, geometry, (mean, std) = self._hidden_maps(image)
        padded = xp.zeros((self.n_filters,) + geometry.fft_shape, dtype=self.dtype)
        padded[(slice(None),) + tuple(slice(0, b) for b in geometry.hidden)] = hidden
        hidden_spec = rfftn(padded, geometry.fft_shape, xp)
        visible = self._visible(hidden_spec, self._filter_spectra(geometry), geometry)
        visible = visible[(slice(None),) + tuple(slice(0, b) for b in geometry.blocks)]
        return self._pixels(visible, geometry), (mean, std)

    @gpu_memory_guard("ConvRBM")
    def detection_input(self, image: ArrayLike | Array, *, source: str = "reconstruction",
                        blur: float = 2.0) -> Array:
        """A single-channel map for iterative voting in place of the Gaussian pre-blur.

        ``source='reconstruction'`` (default): the model's reconstruction of
        the image (:meth:`reconstruct`, the visible mean given the hidden
        expectations: the image re-drawn with the learned filters, chromatin
        texture and noise the filters do not explain left out), then the
        detector's own pre-blur (a Gaussian of ``blur`` pixels; 0: none).
        ``source='nucleus_map'``: the single hidden map most correlated with
        the image (the filter that fires on nuclei; chosen without labels),
        then the pre-blur ``blur`` (on H&E a quarter of the typical nucleus
        radius, the voting radius / 6, detected best: ``NucleusFeatures(r,
        source='nucleus_map')`` sets it). ``source='principal_component'``:
        the first principal component of the hidden maps, signed to correlate
        positively with the image (the choice before 2026-11-24). Each keeps
        the input's polarity (bright nuclei stay bright, dark ones dark, as
        ``iterative_voting(polarity=...)`` expects) and is standardised to zero mean and unit variance. A 2D
        RGB(A) image is read as H&E, through its hematoxylin density (nuclei
        bright), as :func:`ivote.detect.iterative_voting` does.

        Returns
        -------
        ndarray
            Same spatial shape as ``image``, the model's dtype, on the model's backend.

        Notes
        -----
        Chosen on ``../shared/data`` (docs/features.md): on H&E (gbm40) the
        reconstruction with the 2-pixel blur detected best of the principal
        component, the reconstruction without blur, a blob-weighted sum of the
        hidden maps and the least-squares fit, with filters about half the
        voting radius (:class:`ivote.features.NucleusFeatures`). Against the
        best blur width (a quarter of the true radius) neither is clearly
        better at the default threshold (0.862 and 0.864 vs 0.864 on all 15
        gbm40 tiles); the nucleus map is ahead at a per-image best threshold
        (0.885 vs 0.874), the reconstruction less so (0.879).
        """
        xp = self.xp
        if source not in _DETECTION_SOURCES:
            raise ValueError(f"source must be one of {', '.join(map(repr, _DETECTION_SOURCES))}; got {source!r}")
        blur = check_positive(blur, "blur", allow_zero=True)
        if self.ndim == 2 and getattr(image, "ndim", 0) == 3 and image.shape[-1] in (3, 4):
            image = as_grayscale(image, rgb=True)  # H&E: hematoxylin density, nuclei bright
        image = to_device(self._check(image), xp)
        if source == "reconstruction":
            # standardised units: the map is standardised at the end anyway (blur and
            # standardising are affine-invariant), and huge or tiny inputs cannot overflow
            return self._blurred(self._reconstruct_standardised(image)[0], blur)
        features = self.transform(image).reshape(self.n_filters, -1).astype(np.float64)
        features -= features.mean(axis=1, keepdims=True)
        target = _standardise(image, xp, np.float64)[0].ravel()
        if source == "nucleus_map":
            # the map whose (centred) response is most correlated with the image
            correlation = (features @ target) / xp.maximum(xp.sqrt((features**2).sum(axis=1)), 1e-300)
            return self._blurred(features[int(xp.argmax(correlation))].reshape(image.shape), blur)
        _, vectors = xp.linalg.eigh(features @ features.T)
        component = vectors[:, -1] @ features  # eigh sorts eigenvalues ascending
        if float(component @ target) < 0:
            component = -component
        scale = float(component.std())
        component = component.reshape(image.shape) / (scale if scale > 0 else 1.0)
        return component.astype(self.dtype)

    def _blurred(self, signal, blur):
        """``signal`` blurred by a Gaussian of ``blur`` pixels (0: none), standardised, in the model's dtype."""
        signal = signal.astype(np.float64)
        if blur > 0:
            signal = ndimage_module(self.xp).gaussian_filter(signal, blur, mode="nearest")
        return _standardise(signal, self.xp, self.dtype)[0]

    # ------------------------------------------------------------ save/load

    def save(self, path: str | os.PathLike | BinaryIO) -> None:
        """Write the parameters to ``path`` (``.npz`` format, no pickled objects).

        ``path`` is written as given (no ``.npz`` is appended); an open binary
        file works too.
        """
        if self.filters_ is None:
            raise RuntimeError("the model is not fitted yet: nothing to save")
        if not (bool(self.xp.isfinite(self.filters_).all()) and bool(self.xp.isfinite(self.hidden_bias_).all())
                and math.isfinite(self.visible_bias_)):
            raise TrainingDivergedError("the model's parameters hold NaN or infinite values (a diverged training); "
                                        "train it again with a lower learning_rate or momentum")
        if hasattr(path, "write"):
            self._savez(path)
            return path
        with open(path, "wb") as handle:
            self._savez(handle)
        return Path(path)

    def _savez(self, handle):
        write_model(
            handle,
            filters=to_host(self.filters_),
            hidden_bias=to_host(self.hidden_bias_),
            visible_bias=np.array(self.visible_bias_, dtype=np.float64),
            stride=np.array(self.stride),
            seed=np.array(self.seed),
            init_scale=np.array(self.init_scale),
            hidden_extent=np.array(self.hidden_extent),
            reconstruction_errors=np.asarray(self.reconstruction_errors_, dtype=np.float64),
        )

    @classmethod
    def load(cls, path, *, xp=None):
        """Read a model written by :meth:`save` (exact round trip).

        Raises FileNotFoundError for a missing file and
        :class:`~ivote.errors.InputFileError` (a ValueError and an OSError)
        naming the file for anything else: not a model, truncated, incomplete,
        holding NaN or inconsistent parameters.
        """
        arrays = read_model(path)
        filters, hidden_bias = arrays["filters"], arrays["hidden_bias"]
        model = cls(filters.shape[0], filters.shape[1:], stride=int(arrays["stride"]), seed=int(arrays["seed"]),
                    dtype=filters.dtype, xp=xp, init_scale=float(arrays["init_scale"]),
                    # models saved before the option existed were trained with 'same'
                    hidden_extent=str(arrays["hidden_extent"]) if "hidden_extent" in arrays else "same")
        model.filters_ = to_device(filters, model.xp)
        model.hidden_bias_ = to_device(hidden_bias, model.xp)
        model.visible_bias_ = float(arrays["visible_bias"])
        model.reconstruction_errors_ = [float(e) for e in arrays.get("reconstruction_errors", ())]
        return model

    def memory_estimate(self, shape: Sequence[int]) -> dict:
        """Bytes of the key variables of one CD-1 step on an image of ``shape`` (cf. thesis eq. 1.14).

        Spectra of the visible units (v0, v1), hidden units (h0, h1), filters and
        the gradient accumulator, plus the spatial hidden/noise buffers, all for
        one image (no batch dimension).
        """
        if isinstance(self._filter_shape, int) and self.filters_ is None:
            self._initialise(len(shape))
        g = self._geometry(tuple(shape))
        spectra, buffers = self._step_bytes(g)
        return {"fft_shape": g.fft_shape, "channels": g.n_channels, "spectra": spectra, "spatial": buffers,
                "total": spectra + buffers}

    def _step_bytes(self, g):
        """Bytes of spectra and of spatial buffers of one CD-1 step or transform in geometry ``g``."""
        real = self.dtype.itemsize
        nc, nk = g.n_channels, self.n_filters
        spectra = 2 * real * math.prod(g.freq_shape) * (2 * nc + 2 * nk + 2 * nk * nc)
        return spectra, real * math.prod(g.fft_shape) * (2 * nc + 3 * nk)

    def _check_memory(self, shape, extent):
        """Refuse (ResourceLimitError) on the host a step whose buffers exceed ``IVOTE_MAX_MEMORY``,
        before any is allocated (estimated at the smallest FFT shape)."""
        if self.xp is not np:
            return
        from .._limits import check_budget

        geometry = _Geometry.of(tuple(shape), self.stride, self.filter_shape, extent=extent)
        check_budget(f"ConvRBM with {self.n_filters} filters {'x'.join(map(str, self.filter_shape))} on "
                     f"{'x'.join(map(str, shape))} pixels", memory=sum(self._step_bytes(geometry)),
                     advice="use fewer filters, smaller images or patch_shape (--patch)")

    def __repr__(self):
        return (f"ConvRBM(n_filters={self.n_filters}, filter_shape={self._filter_shape!r}, stride={self.stride}, "
                f"hidden_extent={self.hidden_extent!r}, fitted={self.filters_ is not None})")

