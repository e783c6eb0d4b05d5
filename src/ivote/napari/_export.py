"""Export points and outlines from napari to QuPath (GeoJSON), Fiji (ROI set) or CSV, the format picked in the
file dialog; and QuPath GeoJSON points opened as a Points layer. The writing is ``ivote.export``'s."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..export import EXPORT_FORMATS, export_format, export_labels, export_points

__all__ = ["add_outlines_button", "ask_path", "export_labels_layer", "export_points_layer", "get_geojson_reader"]

FILTERS = {"csv": "CSV (*.csv)", "geojson": "QuPath GeoJSON (*.geojson)", "roi-zip": "Fiji ROI set (*.zip)"}


def ask_path(parent, title: str, suggested: str, formats=("csv", "geojson", "roi-zip")) -> str | None:
    """A save dialog offering ``formats``; the chosen filter's suffix is added to a name without one."""
    from qtpy.QtWidgets import QFileDialog

    filters = [FILTERS[f] for f in formats]
    path, chosen = QFileDialog.getSaveFileName(parent, title, suggested, ";;".join(filters))
    if not path:
        return None
    known = {s for f in formats for s in EXPORT_FORMATS[f]}
    if Path(path).suffix.lower() not in known:
        chosen_format = next((f for f in formats if FILTERS[f] == chosen), formats[0])
        path = f"{path}{EXPORT_FORMATS[chosen_format][0]}"
    return path


def _layer_points(layer):
    """(pixel coordinates, scores or None, frames or None) of a Points layer: its data coordinates,
    which for Detect's layers and napari-ivote's reader are the image's pixels."""
    points = np.asarray(layer.data, dtype=np.float64).reshape(-1, layer.ndim)
    axes = str(layer.metadata.get("axes", ""))
    times = None
    if layer.ndim == 4 or (axes.startswith("t") and len(axes) == layer.ndim):  # frame first
        times, points = np.round(points[:, 0]).astype(np.int64), points[:, 1:]
    if points.shape[1] not in (2, 3):
        raise ValueError(f"only 2D or 3D points (or T plus 2D/3D) can be exported; '{layer.name}' has "
                         f"{layer.ndim} dimensions")
    features = layer.features
    scores = np.asarray(features["score"], dtype=np.float64) if "score" in features else None
    return points, scores, times


def export_points_layer(layer, path=None, *, parent=None) -> str | None:
    """Write a Points layer to ``path`` (or where the dialog says): ``.csv`` napari-ivote's table
    (the plugin's writer), ``.geojson`` QuPath point detections, ``.zip`` a Fiji ROI set."""
    if not path:
        suggested = f"{layer.metadata.get('ivote_image', 'nuclei')}_nuclei.csv"
        path = ask_path(parent, "Export points", suggested)
    if not path:
        return None
    if export_format(path) == "csv":
        from ._io import write_points

        data, attributes, _ = layer.as_layer_data_tuple()
        return write_points(path, data, attributes)[0]
    points, scores, times = _layer_points(layer)
    return str(export_points(path, points, scores, times=times))


def export_labels_layer(layer, path=None, *, parent=None) -> str | None:
    """Write a Labels layer's outlines (``.geojson``, ``.zip``) or measurements (``.csv``) to ``path``
    (or where the dialog says); its scale, when a length, sizes the measurements."""
    from .._units import to_micrometres
    from ._units import unit_name

    if not path:
        path = ask_path(parent, "Export outlines", f"{layer.name.replace(':', '')}.geojson",
                        formats=("geojson", "roi-zip", "csv"))
    if not path:
        return None
    labels = np.asarray(layer.data[0] if layer.multiscale else layer.data)
    if labels.ndim not in (2, 3):
        raise ValueError(f"only 2D or 3D labels can be exported; '{layer.name}' has {labels.ndim} dimensions "
                         "(a time-lapse: export one frame)")
    unit = unit_name(getattr(layer, "units", None)) or unit_name(layer.metadata.get("units"))
    lengths = unit is not None and to_micrometres(1.0, unit) is not None  # a scale in pixels sizes nothing
    spacing = tuple(float(s) for s in layer.scale)[-labels.ndim:] if lengths else None
    translate = tuple(float(t) for t in layer.translate)[-labels.ndim:] if lengths else None
    return str(export_labels(path, labels, spacing=spacing, translate=translate, units=unit if lengths else None))


def _labels_to_export(viewer):
    """The selected Labels layer, else the topmost one, else None."""
    from napari.layers import Labels

    active = viewer.layers.selection.active
    if isinstance(active, Labels):
        return active
    return next((layer for layer in reversed(viewer.layers) if isinstance(layer, Labels)), None)


def add_outlines_button(dock):
    """An "Export outlines…" button above the dock's status line: the selected (or topmost) Labels layer to
    GeoJSON, a Fiji ROI set or a measurements CSV. Returns the button."""
    from magicgui.widgets import PushButton

    button = PushButton(text="Export outlines…", tooltip="Save the nuclei outlines of the selected Labels layer for "
                        "QuPath (GeoJSON, with measurements), Fiji (ROI set .zip) or as a measurements CSV.")

    def export(path=None):
        layer = _labels_to_export(dock.viewer)
        if layer is None:
            return dock.status.show("Nothing to export yet: Run the segmentation first.", error=True)
        try:
            written = export_labels_layer(layer, path, parent=dock.native)
        except (OSError, ValueError, ImportError) as exc:
            return dock.status.show(f"export failed: {exc}", error=True)
        if written:
            dock.status.show(f"exported the outlines of '{layer.name}' to {written}")

    button.changed.connect(lambda: export())
    dock.insert(dock.index(dock.status) if dock.status in dock else len(dock) - 1, button)  # above the status line
    return button


def _has_points(path: Path) -> bool:
    from ..export._geojson_read import load_features

    try:
        return any((f.get("geometry") or {}).get("type") in ("Point", "MultiPoint") for f in load_features(path))
    except (OSError, ValueError):
        return False


def get_geojson_reader(path):
    """napari reader hook: QuPath GeoJSON points (``.geojson``) as a Points layer, or None."""
    if isinstance(path, (list, tuple)):
        if len(path) != 1:
            return None
        path = path[0]
    path = Path(path)
    if path.suffix.lower() != ".geojson" or not path.is_file() or not _has_points(path):
        return None
    from ._io import read_points

    return read_points
