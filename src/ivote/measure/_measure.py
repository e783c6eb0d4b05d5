"""Per-nucleus measurements of a label image, in physical units.

One row per label: centroid (physical units and pixels), area (2D) or volume (3D),
equivalent diameter, axis lengths (and eccentricity in 2D), solidity, the image's mean and
integrated intensity inside the nucleus, and the detection score and cluster id where known.
The shape and intensity columns are scikit-image's ``regionprops_table`` with ``spacing``;
a CuPy label image is measured on the host.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .._backend import to_host
from .._typing import Array, ArrayLike, Spacing
from .._validate import check_spacing
from .._units import unit_symbol
from ..io import write_atomic

__all__ = ["measure_nuclei", "write_table_csv"]

_AXES = "zyx"
def _check_labels(labels) -> np.ndarray:
    labels = np.asarray(to_host(labels))
    if labels.ndim not in (2, 3):
        raise ValueError(f"labels must be a 2D or 3D label image; got {labels.ndim}D (shape {labels.shape})")
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be an integer label image (0 = background); got dtype {labels.dtype}")
    if labels.size and labels.min() < 0:
        raise ValueError("labels must be >= 0 (0 = background); found negative labels")
    return labels


def _compact(labels) -> tuple[np.ndarray, np.ndarray | None]:
    """Labels renumbered 1..K when their largest id exceeds the pixel count (ids such as
    2**40 would make scikit-image allocate an array of that many entries), with the
    table from those numbers back to the given ids; else the labels and None."""
    if labels.size == 0 or int(labels.max()) <= labels.size:
        return labels, None
    given, compact = np.unique(labels, return_inverse=True)
    if given[0] != 0:  # no background pixel: the first id is a nucleus, number it 1
        given = np.concatenate([np.zeros(1, dtype=given.dtype), given])
        compact = compact + 1
    return compact.reshape(labels.shape).astype(np.int64), given


def _check_image(image, shape) -> np.ndarray | None:
    if image is None:
        return None
    image = np.asarray(to_host(image))
    if image.shape != shape and not (image.ndim == len(shape) + 1 and image.shape[:-1] == shape):
        raise ValueError(
            f"image must have the labels' shape {shape} (or that plus a channel axis); got {image.shape}")
    if not (np.issubdtype(image.dtype, np.number) or image.dtype == bool) or np.iscomplexobj(image):
        raise ValueError(f"image must be real-valued; got dtype {image.dtype}")
    image = image.astype(np.float64, copy=False)
    if not np.isfinite(image).all():
        raise ValueError("image contains NaN or infinite values")
    return image


def _per_label(values, ids, points, labels, name: str) -> np.ndarray:
    """One value per label in ``ids``: from a per-label array (row k is label k + 1), or, with
    ``points``, the value of the point inside each label (the largest when several are)."""
    values = np.asarray(to_host(values), dtype=np.float64).ravel()
    if points is None:
        if len(values) < (int(ids.max()) if len(ids) else 0):
            raise ValueError(f"{name} must have one value per label (row k for label k + 1, {int(ids.max())} "
                             f"rows); got {len(values)}. Pass points= to look them up by position instead")
        return values[ids - 1] if len(ids) else np.zeros(0)
    points = np.asarray(to_host(points), dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != labels.ndim:
        raise ValueError(f"points must be an (N, {labels.ndim}) array of pixel coordinates; got {points.shape}")
    if len(values) != len(points):
        raise ValueError(f"{name} must have one value per point ({len(points)}); got {len(values)}")
    pixel = np.rint(points).astype(np.int64)
    inside = np.all((pixel >= 0) & (pixel < labels.shape), axis=1)
    hit = np.zeros(len(points), dtype=np.int64)
    hit[inside] = labels[tuple(pixel[inside].T)]
    out = np.full(int(ids.max()) + 1 if len(ids) else 1, np.nan)
    order = np.argsort(values, kind="stable")  # later (larger) values win
    out[hit[order]] = values[order]
    return out[ids]


def measure_nuclei(
    labels: ArrayLike | Array,
    image: ArrayLike | Array | None = None,
    *,
    spacing: Spacing = None,
    translate: Sequence[float] | None = None,
    units: str | None = "um",
    scores: ArrayLike | Array | None = None,
    cluster_ids: ArrayLike | Array | None = None,
    points: ArrayLike | Array | None = None,
) -> dict[str, np.ndarray]:
    """Measure every nucleus of a label image, in physical units.

    Parameters
    ----------
    labels : (Y, X) or (Z, Y, X) int array (NumPy or CuPy)
        Label image, 0 for background (e.g. from :func:`ivote.segment_nuclei`).
    image : array, optional
        Intensity image of the same shape (or with a trailing channel axis) for
        the mean and integrated intensities.
    spacing : sequence of float, optional
        Pixel size along each axis (default 1: units are pixels).
    translate : sequence of float, optional
        World position of pixel 0 (the layer's translate), added to the centroids.
    units : str, optional
        Unit of ``spacing``, used in column names (``'um'``: ``area_um2``); ignored
        (``px``) without a spacing.
    scores, cluster_ids : array_like, optional
        Detection score and cluster id: one per label (row k for label k + 1,
        the order of :func:`ivote.segment_nuclei`'s seeds), or one per point of
        ``points``.
    points : (N, ndim) array_like, optional
        Pixel coordinates of the points that ``scores`` / ``cluster_ids`` belong
        to; each label takes the value of the point inside it (the largest when
        several are, NaN when none is).

    Returns
    -------
    dict of str to (M,) array
        One entry per column, one row per label present, in label order
        (ready for ``pandas.DataFrame`` or a napari layer's ``features``):
        ``label``; ``centroid_z_<unit>, centroid_y_<unit>, centroid_x_<unit>``
        (2D: y, x) and, with a spacing, the same in pixels (``centroid_y_px``...);
        ``pixels``; ``area_<unit>2`` (2D) or ``volume_<unit>3`` (3D);
        ``equivalent_diameter_<unit>``; ``axis_major_length_<unit>``,
        ``axis_minor_length_<unit>``; ``eccentricity`` (2D); ``solidity``
        (NaN for a flat or single-pixel nucleus with no convex hull);
        ``mean_intensity`` and ``integrated_intensity`` (sum over the pixels;
        ``_c0``, ``_c1``... per channel) with an image; ``score`` and
        ``cluster_id`` when given.

    Notes
    -----
    Shape and intensity columns come from :func:`skimage.measure.regionprops_table`
    with ``spacing``; the equivalent diameter is that of a disc (2D) or ball (3D)
    of the same area or volume.

    Examples
    --------
    >>> import numpy as np
    >>> labels = np.zeros((10, 10), int)
    >>> labels[2:6, 3:5] = 1
    >>> table = measure_nuclei(labels, labels * 2.0, spacing=(0.5, 0.5))
    >>> float(table["area_um2"][0]), float(table["centroid_y_um"][0]), float(table["integrated_intensity"][0])
    (2.0, 1.75, 16.0)
    """
    from skimage.measure import regionprops, regionprops_table

    labels = _check_labels(labels)
    ndim = labels.ndim
    image = _check_image(image, labels.shape)
    if spacing is None:
        units = None
    spacing = check_spacing(spacing, ndim)
    if translate is None:
        translate = (0.0,) * ndim
    translate = tuple(float(t) for t in translate)
    if len(translate) != ndim or not all(math.isfinite(t) for t in translate):
        raise ValueError(f"translate must have {ndim} finite values for a {ndim}D image; got {translate}")
    unit = unit_symbol(units) or "px"
    axes = _AXES[-ndim:]

    properties = ["label", "num_pixels", "area", "centroid", "equivalent_diameter_area",
                  "axis_major_length", "axis_minor_length"]
    if ndim == 2:
        properties.append("eccentricity")
    if image is not None:
        properties.append("intensity_mean")
    labels, label_ids = _compact(labels)
    props = regionprops_table(labels, image, spacing=spacing, properties=properties)
    ids = np.asarray(props["label"], dtype=np.int64)
    table: dict[str, np.ndarray] = {"label": ids if label_ids is None else label_ids[ids]}
    physical = [np.asarray(props[f"centroid-{axis}"], dtype=np.float64) for axis in range(ndim)]  # from pixel 0
    for axis, name in enumerate(axes):
        table[f"centroid_{name}_{unit}"] = physical[axis] + translate[axis]
    if unit != "px":
        for axis, name in enumerate(axes):
            table[f"centroid_{name}_px"] = physical[axis] / spacing[axis]
    table["pixels"] = np.asarray(props["num_pixels"], dtype=np.int64)
    table[f"area_{unit}2" if ndim == 2 else f"volume_{unit}3"] = np.asarray(props["area"], dtype=np.float64)
    table[f"equivalent_diameter_{unit}"] = np.asarray(props["equivalent_diameter_area"], dtype=np.float64)
    table[f"axis_major_length_{unit}"] = np.asarray(props["axis_major_length"], dtype=np.float64)
    table[f"axis_minor_length_{unit}"] = np.asarray(props["axis_minor_length"], dtype=np.float64)
    if ndim == 2:
        table["eccentricity"] = np.asarray(props["eccentricity"], dtype=np.float64)
    table["solidity"] = np.array([_solidity(region) for region in regionprops(labels, spacing=spacing)])
    if image is not None:
        channels = [""] if image.ndim == ndim else [f"_c{c}" for c in range(image.shape[-1])]
        for c, tag in enumerate(channels):
            key = "intensity_mean" if tag == "" else f"intensity_mean-{c}"
            mean = np.asarray(props[key], dtype=np.float64)
            table[f"mean_intensity{tag}"] = mean
            table[f"integrated_intensity{tag}"] = mean * table["pixels"]
    if points is not None and scores is None and cluster_ids is None:
        raise ValueError("points only serve to look up scores or cluster_ids; pass one of them too")
    given = table["label"]  # per-label rows follow the given ids; points look up the measured ones
    if scores is not None:
        table["score"] = _per_label(scores, ids if points is not None else given, points, labels, "scores")
    if cluster_ids is not None:
        clusters = _per_label(cluster_ids, ids if points is not None else given, points, labels, "cluster_ids")
        table["cluster_id"] = np.where(np.isnan(clusters), -1, clusters).astype(np.int64)
    return table


def _solidity(region) -> float:
    """Pixels over convex-hull pixels (scikit-image's hull; in 3D counted line by line by the
    segmentation's merge step, many times faster); NaN when the region spans no hull (flat, one pixel)."""
    from ..segment._merge import solidity

    try:
        with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
            warnings.simplefilter("ignore")  # scikit-image warns before it fails or divides by 0
            value = solidity(region.image)
    except Exception:  # qhull fails on coplanar / collinear points
        return math.nan
    return value if math.isfinite(value) else math.nan


def write_table_csv(path: str | os.PathLike, table: Mapping[str, ArrayLike]) -> Path:
    """Write a column table (such as :func:`measure_nuclei`'s) to CSV, atomically.

    Integers are written as integers, floats with the shortest text that reads back
    to the same value, NaN as an empty field, text as it is.
    """
    names = list(table)
    columns = [np.asarray(table[name]) for name in names]
    n_rows = len(columns[0]) if columns else 0
    if any(len(c) != n_rows for c in columns):
        raise ValueError("every column of the table must have the same length")

    def fmt(value) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, (np.integer, int)):
            return str(int(value))
        value = float(value)
        return "" if math.isnan(value) else repr(value)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(names)
            for row in zip(*columns):
                writer.writerow([fmt(v) for v in row])

    return write_atomic(path, write)
