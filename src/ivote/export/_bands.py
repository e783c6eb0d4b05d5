"""A 2D label image too large for memory (OME-Zarr, Dask), outlined and measured band by band of rows.

Each band reads its rows plus a margin below; a label belongs to the band holding its top row, so it is
outlined and measured once, whole, as long as it is no taller than the margin (nuclei are far smaller;
a taller label is an error naming the margin). The outlines and measurements equal those of the whole
image in memory (tested).
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_MARGIN", "label_batches", "outline_batches"]

DEFAULT_MARGIN = 512
"""Rows read below each band: the tallest label a band outlines whole, in pixels."""

_BAND_BYTES = 256 * 2**20


def _band_rows(shape, itemsize: int, margin: int) -> int:
    return max(2 * margin, _BAND_BYTES // max(1, shape[1] * itemsize))


def label_batches(labels, *, spacing=None, translate=None, units="um", measure: bool = True,
                  band_rows: int | None = None, margin: int = DEFAULT_MARGIN):
    """Yield ``(outlines, measurements or None)`` for the labels of a 2D label image, band by band.

    ``labels`` is any 2D array that can be sliced by rows (NumPy, Dask, Zarr); only one band
    (``band_rows`` + ``margin`` rows) is in memory at a time. The outlines are in the image's
    pixel coordinates and the measurements (:func:`ivote.measure_nuclei`'s columns) as for the
    whole image.
    """
    from ..measure._measure import _check_labels, measure_nuclei
    from ._outlines import _plane_outlines

    height = labels.shape[0]
    band_rows = band_rows or _band_rows(labels.shape, np.dtype(labels.dtype).itemsize, margin)
    done: set[int] = set()
    translate = tuple(float(t) for t in translate) if translate is not None else (0.0, 0.0)
    for first in range(0, height, band_rows):
        stop = min(height, first + band_rows + margin)
        band = _check_labels(np.asarray(labels[first:stop]))
        compact, extents = _row_extents(band)
        mine = [(k, label) for k, (label, top, bottom) in extents.items() if top < band_rows and label not in done]
        for k, label in mine:
            if extents[k][2] == band.shape[0] - 1 and stop < height:
                raise ValueError(f"label {label} is taller than the margin of {margin} rows that the banded export "
                                 f"reads below each band (rows {first}-{stop}); give margin= a larger value")
        if not mine:
            continue
        done.update(label for _, label in mine)
        keep = np.zeros(int(compact.max()) + 1, dtype=bool)
        keep[[k for k, _ in mine]] = True
        band = np.where(keep[compact], band, 0)
        outlines = _plane_outlines(band, None, first_row=first)
        table = None
        if measure:
            if spacing is not None:
                shifted = (translate[0] + first * float(spacing[0]), translate[1])
            else:
                shifted = (translate[0] + first, translate[1])
            table = measure_nuclei(band, spacing=spacing, translate=shifted, units=units)
            if spacing is not None:
                table["centroid_y_px"] = table["centroid_y_px"] + first
        yield outlines, table


def _row_extents(band: np.ndarray):
    """The band with ids numbered compactly, and ``{compact id: (label, first row, last row)}``."""
    from scipy import ndimage

    from ..measure._measure import _compact

    compact, given = _compact(band)
    extents = {}
    for index, box in enumerate(ndimage.find_objects(compact)):
        if box is not None:
            label = index + 1 if given is None else int(given[index + 1])
            extents[index + 1] = (label, box[0].start, box[0].stop - 1)
    return compact, extents


def outline_batches(labels, *, spacing=None, translate=None, units="um", measurements=True):
    """``(outlines, measurements or None)`` batches of a label image: one for a NumPy array (2D or
    3D) or a lazy 3D one (read whole), bands of rows (:func:`label_batches`) for a lazy 2D one
    (Dask, Zarr). ``measurements``: True (:func:`ivote.measure_nuclei`'s rows), a column table
    with a ``label`` column, or False."""
    from ..measure._measure import measure_nuclei
    from ._outlines import label_outlines

    lazy = not isinstance(labels, np.ndarray) and getattr(labels, "ndim", None) == 2 and hasattr(labels, "dtype")
    if lazy:
        for outlines, table in label_batches(labels, spacing=spacing, translate=translate, units=units,
                                             measure=measurements is True):
            yield outlines, table if measurements is True else (measurements or None)
        return
    labels = np.asarray(labels)
    outlines = label_outlines(labels)
    if measurements is True:
        measurements = measure_nuclei(labels, spacing=spacing, translate=translate if spacing is not None else None,
                                      units=units)
    yield outlines, measurements or None
