"""One entry point per kind of export, the format picked by name or by the output's suffix
(shared by ``ivote export``, ``--format geojson`` and the napari dock's Export buttons)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["EXPORT_FORMATS", "export_format", "export_labels", "export_points"]

EXPORT_FORMATS = {"geojson": (".geojson", ".json"), "roi-zip": (".zip",), "csv": (".csv",)}
"""Format name -> the output suffixes it takes (the first is its usual one)."""


def export_format(path, given: str | None = None) -> str:
    """``given`` when named, else the format of ``path``'s suffix; an error naming both otherwise."""
    suffix = Path(path).suffix.lower()
    if given is not None:
        if given not in EXPORT_FORMATS:
            raise ValueError(f"export format must be one of {', '.join(EXPORT_FORMATS)}; got {given!r}")
        if suffix not in EXPORT_FORMATS[given]:
            raise ValueError(f"--out for {given} must end in {' or '.join(EXPORT_FORMATS[given])}; "
                             f"got {Path(path).name!r}")
        return given
    for name, suffixes in EXPORT_FORMATS.items():
        if suffix in suffixes:
            return name
    known = ", ".join(f"{s} ({n})" for n, ss in EXPORT_FORMATS.items() for s in ss)
    raise ValueError(f"cannot tell the export format from {Path(path).name!r}: use one of {known}")


def export_points(path, points, scores=None, *, to: str | None = None, times=None, spacing=None, translate=None,
                  units: str | None = "um", radius: float | None = None) -> Path:
    """Write points (pixel coordinates ``(y, x)`` / ``(z, y, x)``) as QuPath GeoJSON, a Fiji ROI
    set or napari-ivote's points CSV, atomically.

    ``spacing``, ``translate``, ``units`` and ``radius`` go into the CSV's header lines
    (:func:`ivote.io.write_points_csv`); GeoJSON and ROI coordinates are pixels, as QuPath and
    Fiji expect. Returns the path written.
    """
    to = export_format(path, to)
    if to == "geojson":
        from ._geojson import write_points_geojson

        return write_points_geojson(path, points, scores, times=times)
    if to == "roi-zip":
        from ._roi import write_points_roi_zip

        if times is not None and len(np.unique(times)) > 1:
            raise ValueError("a time-lapse's points cannot go to one ROI set: export one frame, or use geojson/csv")

        return write_points_roi_zip(path, points, scores)
    from ..io import write_points_csv

    return write_points_csv(path, points, scores, spacing=spacing, translate=translate, units=units, times=times,
                            radius=radius)


def export_labels(path, labels, *, to: str | None = None, spacing=None, translate=None,
                  units: str | None = "um") -> Path:
    """Write a label image's nuclei as QuPath GeoJSON outlines (with their measurements), a Fiji
    ROI set of outlines, or a CSV of :func:`ivote.measure_nuclei`'s measurements, atomically.

    A 3D label image gives one outline per label and Z plane (GeoJSON ``geometry.plane``, ROI
    stack position). A lazy 2D one (Dask, Zarr: a whole slide's labels) is read band by band of
    rows, never whole. Returns the path written.
    """
    return _export_labels(path, labels, to=to, spacing=spacing, translate=translate, units=units)[0]


def _export_labels(path, labels, *, to=None, spacing=None, translate=None, units="um") -> tuple[Path, int]:
    """:func:`export_labels`, and the number of nuclei written."""
    from ._bands import outline_batches

    to = export_format(path, to)
    counted: set[int] = set()

    def counting(batches):
        for outlines, table in batches:
            counted.update(o.label for o in outlines)
            yield outlines, table

    batches = counting(outline_batches(labels, spacing=spacing, translate=translate, units=units,
                                       measurements=to != "roi-zip"))
    if to == "roi-zip":
        from ._roi import _write_zip, outline_rois

        written = _write_zip(path, (roi for outlines, _ in batches for roi in outline_rois(outlines)))
    elif to == "geojson":
        from ._geojson import write_outline_batches_geojson

        written = write_outline_batches_geojson(path, batches)
    else:
        from ..measure._measure import write_table_csv

        tables = [table for _, table in batches if table is not None]
        columns = {name: np.concatenate([t[name] for t in tables]) for name in tables[0]} if tables else \
            {"label": np.zeros(0, dtype=np.int64)}
        written = write_table_csv(path, columns)
    return written, len(counted)
