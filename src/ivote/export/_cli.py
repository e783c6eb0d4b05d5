"""``ivote export INPUT --to geojson|roi-zip|csv --out FILE``.

INPUT is a points table (napari-ivote's CSV from ``ivote detect``, napari's points CSV, or a
QuPath GeoJSON of points) or a label image (OME-TIFF, TIFF, OME-Zarr, e.g. from ``ivote
segment``). Points become QuPath Point detections, Fiji point ROIs or napari-ivote's CSV;
labels become QuPath Polygon detections with their measurements, Fiji polygon ROIs, or a CSV
of measurements. Written atomically.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["register"]

_POINT_SUFFIXES = (".csv", ".geojson", ".json")


def _read_points(path):
    from ..io import read_points_csv

    return read_points_csv(path)  # reads GeoJSON points too (by suffix)


def _cmd_export(args) -> int:
    import numpy as np

    from ..io import check_input_file, check_output_path
    from ._write import EXPORT_FORMATS, _export_labels, export_format, export_points

    source = check_input_file(args.input, "INPUT")
    to = export_format(args.out, args.to)
    check_output_path(args.out, EXPORT_FORMATS[to], inputs=(args.input,))
    if source.suffix.lower() in _POINT_SUFFIXES:
        table = _read_points(source)
        spacing = tuple(args.spacing) if args.spacing else table.spacing
        if spacing is not None and len(spacing) != table.points.shape[1]:
            raise ValueError(f"--spacing must have {table.points.shape[1]} values for {table.points.shape[1]}D "
                             f"points; got {len(spacing)}")
        out = export_points(args.out, table.points, table.scores, to=to, times=table.times, spacing=spacing,
                            translate=table.translate if spacing is not None else None,
                            units=table.units if table.units not in (None, "pixel") else "um")
        print(f"{len(table.points)} points -> {out} ({to})")
        return 0
    from .._files import command_spacing, open_image

    image = open_image(source, axes=args.axes, scene=args.scene)
    if image.is_rgb or set(image.axes) - set("ZYX"):
        raise ValueError(f"{source} has axes {image.axes}: export takes a 2D (YX) or 3D (ZYX) label image")
    labels = image.data if len(image.axes) == 2 else np.asarray(image.data)  # 2D: read band by band
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{source} holds {labels.dtype} values, not labels: give an integer label image "
                         "(0 = background), e.g. from 'ivote segment'")
    spacing = command_spacing(image, args.spacing, command="ivote export")
    translate = image.origin if spacing is not None else None
    out, count = _export_labels(args.out, labels, to=to, spacing=spacing, translate=translate)
    planes = f" in {labels.shape[0]} planes" if labels.ndim == 3 else ""
    print(f"{count} nuclei{planes} -> {out} ({to}{', outlines' if to != 'csv' else ', measurements'})")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export points or labels to QuPath (GeoJSON), Fiji (ROI set .zip) or CSV",
        description="Export nuclei for QuPath and Fiji. Points (a CSV from 'ivote detect', napari's points CSV, "
                    "QuPath GeoJSON points) become point detections or point ROIs; a label image becomes one "
                    "outline per nucleus (per nucleus and Z plane in 3D) with its measurements. Coordinates are "
                    "level-0 pixels, as QuPath and Fiji expect (docs/qupath-fiji.md).",
    )
    parser.add_argument("input", metavar="INPUT",
                        help="points table (.csv, .geojson) or label image (OME-TIFF, TIFF, OME-Zarr)")
    parser.add_argument("--to", choices=("geojson", "roi-zip", "csv"), default=None,
                        help="geojson (QuPath), roi-zip (Fiji ROI Manager), csv (points table, or one row of "
                             "measurements per nucleus for labels) (default: from --out's suffix)")
    parser.add_argument("--out", required=True, help="output file: .geojson, .zip or .csv")
    parser.add_argument("--spacing", type=float, nargs="+", metavar="S",
                        help="pixel size per axis, Z Y X or Y X, for the measurements (default: from the file)")
    parser.add_argument("--axes", default=None, metavar="AXES",
                        help="the label image's stored axes (YX or ZYX) when its metadata does not name them")
    parser.add_argument("--scene", default=None, metavar="S", help="scene of a multi-scene label file")
    parser.set_defaults(func=_cmd_export)
