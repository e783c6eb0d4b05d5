"""Nuclei to QuPath and Fiji: GeoJSON detections, ImageJ ROI sets and CSV tables, and QuPath
points and annotations read back (see docs/qupath-fiji.md)."""

from ._geojson import (Region, read_points_geojson, read_regions_geojson, write_outlines_geojson,
                       write_points_geojson)
from ._outlines import Outline, label_outlines
from ._roi import write_outlines_roi_zip, write_points_roi_zip
from ._write import EXPORT_FORMATS, export_format, export_labels, export_points

__all__ = [
    "EXPORT_FORMATS",
    "Outline",
    "Region",
    "export_format",
    "export_labels",
    "export_points",
    "label_outlines",
    "read_points_geojson",
    "read_regions_geojson",
    "write_outlines_geojson",
    "write_outlines_roi_zip",
    "write_points_geojson",
    "write_points_roi_zip",
]
