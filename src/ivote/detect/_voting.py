"""Iterative voting for nucleus detection: the public function.

:func:`iterative_voting` checks its input, chooses the backend, runs the passes
and applies the threshold rule. Its parts: ``_settings`` (the checks before any
work), ``_backends`` (one detection per backend), ``_cells`` (local maxima and
the greedy scan), ``_thresholds`` (the score and contrast rules) and
``_detections`` (the result); ``Detections`` and the rules are importable from
here as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import get_array_module, gpu_memory_guard, select_xp, to_device, use_numba
from .._typing import Array, ArrayLike, Callback, Spacing
from .._validate import check_finite_range, check_image, check_radius
from ..errors import IvoteError, ParameterTypeError
from ._backends import _detect_on_cpu, _detect_on_gpu, _detect_on_numba
from ._colour import spatial_signal as _spatial_image
from ._detections import Detections
from ._plan import make_plan
from ._settings import _check_work, check_settings
from ._thresholds import _DEFAULT_MIN_CONTRAST, _resolve_rule, auto_threshold, otsu_threshold, reference_threshold

__all__ = ["Detections", "auto_threshold", "iterative_voting", "otsu_threshold", "reference_threshold"]


@gpu_memory_guard("iterative_voting")
def iterative_voting(
    image: ArrayLike | Array,
    *,
    radius: float | str,
    spacing: Spacing = None,
    polarity: str = "bright",
    blur: float | None = None,
    threshold: str | float | None = "auto",
    min_contrast: float = _DEFAULT_MIN_CONTRAST,
    channel: int | None = None,
    stains: str | ArrayLike | None = None,
    features: Any = None,
    return_votes: bool = False,
    iter_callback: Callback = None,
    backend: str = "auto",
    detector: Any = None,
) -> Detections:
    """Detect nuclei by iterative voting (Parvin 2007, Saadatifard 2018).

    Every pixel votes, with the weight of its gradient magnitude, for the pixels
    of a cone that starts along its gradient (into a bright nucleus; the nearest
    direction of an offset of the voting disc/ball, docs/detect.md). After each
    pass every voter turns towards the largest vote inside its cone and the cone
    angle halves, from pi/2 until it is under one pixel wide; the votes then
    pile up at the nucleus centres. Cells are the local maxima of the final vote
    field at least ``radius`` apart, scoring at least ``threshold`` and standing
    out from the image noise by at least ``min_contrast``.

    Parameters
    ----------
    image : (Y, X), (Z, Y, X) or RGB (Y, X, 3|4) array
        NumPy or CuPy array, any real dtype. RGB is read as H&E: detection runs
        on the hematoxylin density (colour deconvolution), where nuclei are
        bright whatever ``polarity`` says, unless ``channel`` is given. A grey
        Dask array is detected block by block with the same result
        (:func:`ivote.distributed.detect_chunked`; ``ivote.iterative_voting``
        routes it, see ``detect/_dispatch.py``).
    radius : float or 'auto'
        Nucleus radius (largest expected), in the units of ``spacing``
        (micrometres when known, else pixels). Votes reach this far; detected
        cells are at least this far apart. ``'auto'`` estimates it from the
        image (:func:`ivote.detect.estimate_radius`, on the same signal and
        backend); the result's ``radius`` holds the value used.
    spacing : sequence of float, optional
        Pixel size per spatial axis; default 1. Anisotropic volumes (z coarser
        than x) are handled without resampling: all distances are physical.
    polarity : {'bright', 'dark'}
        Bright nuclei on a dark background (fluorescence) or dark on bright.
    blur : float, optional
        Gaussian sigma of the pre-blur, in the units of ``spacing``. Default:
        2 pixels of the finest axis. 0 turns it off.
    threshold : 'auto', 'otsu', 'reference', 'none', None or float
        Score threshold: ``'auto'`` (default, :func:`auto_threshold`: the
        lower of Otsu's threshold of the log scores and 0.3 times the typical
        nucleus's score, a contrast floor between the contrasts' two classes
        where they fall in two, and on textured images 0.4 times the
        typical nucleus's score instead),
        ``'otsu'`` (Otsu's on the log scores of all local maxima),
        ``'reference'`` (:func:`reference_threshold`), none (every maximum is
        returned) or a value.
    min_contrast : float
        A cell's blurred intensity must exceed the lowest within ``radius`` of it
        by this many standard deviations of the image noise (default 3; 0: no
        test). Scores are relative to the image's strongest edge and Otsu's
        threshold always splits them, so without this an image of pure noise
        would still give cells. A cell that is not brighter than five eighths
        of the ring between half the radius and the radius around it (a point
        on a ramp, a gradient or the edge of a blob much larger than the radius)
        has contrast 0. Applied after ``threshold``, whichever it is
        (``'auto'`` may raise it; the result's ``min_contrast`` is the floor used).
    channel : int, optional
        For RGB input, detect on this channel instead of the hematoxylin density.
    stains : None, 'auto' or (2, 3) array
        For RGB input read as H&E: Ruifrok's fixed stain vectors (None, the
        default), vectors estimated from the image (``'auto'``, Macenko; see
        :func:`ivote.detect.stain_vectors`) or the given hematoxylin and
        eosin optical-density vectors.
    features : array or object, optional
        Detect on this (spatial-shape) array instead of the blurred image, or on
        ``features.detection_input(image)`` for an object with that method.
    return_votes : bool
        Keep the final vote field in the result.
    iter_callback : callable, optional
        ``iter_callback(pass_index, n_passes)`` after each pass is queued;
        raising from it cancels.
    backend : {'auto', 'numpy', 'numba', 'cupy'}
        'auto' runs on CuPy for CuPy input, else on the default backend
        (``IVOTE_BACKEND``); 'numba' the compiled CPU kernels, 'numpy' the
        NumPy path. Both CPU paths give the same cells.
    detector : LearnedDetector or path, optional
        A detector learned from corrected points (:func:`ivote.learn_detector`,
        or the JSON file it was saved to): every local maximum is scored by its
        probability of being a nucleus, and ``threshold='auto'`` is the
        detector's decision threshold (a number is a probability); the contrast
        floor is not applied (the contrast is one of its features). The image
        must be of the training's kind and ``radius``, ``spacing`` and
        ``polarity`` the training's (``radius=None`` takes the detector's).

    Returns
    -------
    Detections

    Notes
    -----
    Weights and votes are integers (gradient magnitude quantised to
    ``weight_scale`` levels) and cone tests use the same float32 arithmetic on
    both backends, so NumPy and CuPy give the same cells and GPU runs repeat
    exactly. Voters below 1/64 of the largest gradient are skipped.

    References
    ----------
    .. [1] B. Parvin, Q. Yang, J. Han, H. Chang, B. Rydberg, M. H.
           Barcellos-Hoff, "Iterative voting for inference of structural
           saliency and characterization of subcellular events", IEEE Trans.
           Image Process. 16(3), 615-623 (2007). :doi:`10.1109/TIP.2007.891154`
    .. [2] L. Saadatifard, L. C. Abbott, L. Montier, J. Ziburkus, D. Mayerich,
           "Robust cell detection for large-scale 3D microscopy using
           GPU-accelerated iterative voting", Front. Neuroanat. 12:28 (2018).
           :doi:`10.3389/fnana.2018.00028`

    Examples
    --------
    >>> from ivote.data import synthetic_nuclei
    >>> from ivote.detect import iterative_voting
    >>> from ivote.metrics import match_points
    >>> image, labels, centers, *_ = synthetic_nuclei((96, 96), radius=6, seed=4)
    >>> found = iterative_voting(image, radius=6, backend="numpy")
    >>> found.points.shape, found.n_passes
    ((38, 2), 5)
    >>> match_points(found.points, centers, tolerance=3).f1
    1.0
    """
    if detector is not None:  # ivote.iterative_voting (detect/_dispatch.py) applies it, above both
        raise IvoteError("detector= is applied by ivote.iterative_voting (ivote.detect.iterative_voting)")
    xp = select_xp(backend, image)
    if features is not None and hasattr(features, "detection_input"):
        features = features.detection_input(image)
    image = check_image(image, allow_rgb=True, finite=features is not None)  # else: from min/max below
    image = to_device(image, xp) if get_array_module(image) is not xp else image
    signal, from_rgb = _spatial_image(image, channel, xp, stains)
    ndim = signal.ndim
    spacing, blur, min_contrast = check_settings(signal.shape, spacing, polarity, blur, min_contrast, threshold)
    sign = 1.0 if (polarity == "bright" or (from_rgb and channel is None)) else -1.0
    radius_estimated = isinstance(radius, str) and radius.strip().lower() == "auto"
    radius_note = ""
    if radius_estimated:
        from ._radius import auto_radius

        check_finite_range([float(signal.min()), float(signal.max())], name="image")
        radius, radius_note = auto_radius(signal, spacing, sign, xp, "cupy" if xp is not np else (
            "numba" if use_numba(xp, backend) else "numpy"))
    elif isinstance(radius, str):
        raise ParameterTypeError(f"radius must be a positive number or 'auto'; got {radius!r}")
    radius = check_radius(radius, signal.shape, spacing)
    if iter_callback is not None and not callable(iter_callback):
        raise TypeError(f"iter_callback must be callable; got {iter_callback!r}")

    if features is not None:
        features = check_image(features, name="features", ndims=(ndim,))
        if tuple(features.shape) != tuple(signal.shape):
            raise ValueError(f"features must have the image's spatial shape {tuple(signal.shape)}; got {tuple(features.shape)}")
        signal = to_device(features, xp) if get_array_module(features) is not xp else features
    compiled = xp is np and use_numba(xp, backend)
    from ._memory import check_detection_memory  # before any table that grows with the radius

    check_detection_memory("iterative_voting", signal.shape, radius, spacing,
                           "cupy" if xp is not np else ("numba" if compiled else "numpy"))
    plan = make_plan(radius, spacing, ndim)
    _check_work(signal.shape, plan, spacing, blur if features is None else 0.0, xp is not np,
                "numba" if compiled else "numpy")
    if signal.size >= 2**31 and xp is not np:
        raise ValueError(f"image is too large for one GPU pass ({signal.size} pixels >= 2**31); process it in tiles")

    detect_on = _detect_on_gpu if xp is not np else (_detect_on_numba if compiled else _detect_on_cpu)
    votes, coords, values, contrast, n_passes = detect_on(
        image, signal, plan, sign, blur, spacing, from_rgb, features is not None, iter_callback, return_votes
    )
    candidates = coords.astype(np.float64)
    candidate_scores = values / float(plan.weight_scale)
    vote_field = votes.astype(np.float32) / np.float32(plan.weight_scale) if return_votes else None
    requested = min_contrast
    value, min_contrast = _resolve_rule(threshold, candidate_scores, contrast, min_contrast)
    keep = (candidate_scores >= value) & (contrast >= min_contrast)
    return Detections(
        points=candidates[keep],
        scores=candidate_scores[keep],
        threshold=value,
        candidates=candidates,
        candidate_scores=candidate_scores,
        candidate_contrasts=contrast,
        min_contrast=min_contrast,
        vote_field=vote_field,
        n_passes=n_passes,
        backend="cupy" if xp is not np else ("numba" if compiled else "numpy"),
        radius=radius,
        spacing=spacing,
        radius_estimated=radius_estimated,
        radius_note=radius_note,
        requested_min_contrast=requested,
    )

