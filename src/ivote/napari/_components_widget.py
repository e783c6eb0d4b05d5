"""The "Label and count" dock widget (magicgui): count and measure nuclei (math in ivote.components / measure)."""

from __future__ import annotations

import csv

import numpy as np
from magicgui.widgets import ComboBox, Container, FloatSpinBox, PushButton
from napari.layers import Image, Labels, Points

from .. import _backend
from ..components import cluster_points, label
from ..io import write_atomic
from ._layer_sample import layer_sample
from ._measure_call import measure_labels
from ._names import COMPONENTS, LABELS, NUCLEI, result_name, source_name
from ._units import unit_label, unit_name
from ._widgets_common import (DockWidget, Status, layer_choices, show_result, spatial_transform, warm_labels_display,
                              world_to_pixels)

SINGLE_COLOR = (0.6, 0.6, 0.6, 1.0)


class LabelCountWidget(DockWidget):
    """Count and measure the nuclei of a Labels layer, a thresholded image, or clusters of points."""

    def __init__(self, napari_viewer):
        self.layer = ComboBox(label="layer", choices=layer_choices(napari_viewer, (Labels, Image, Points)),
                              tooltip="Labels: count and measure its labels. Image: threshold, label the "
                                      "connected components, measure. Points: cluster points closer than a distance.")
        self.intensity = ComboBox(label="intensity image", choices=layer_choices(napari_viewer, Image),
                                  nullable=True, tooltip="Image whose mean and integrated intensity are measured "
                                                         "in each label (optional).")
        self.threshold = FloatSpinBox(label="image threshold (>)", min=-1e12, max=1e12, step=0.01,
                                      tooltip="Pixels above this are foreground; set to Otsu's threshold of the image "
                                              "when the layer is chosen.")
        self.connectivity = ComboBox(label="connectivity", choices=["faces", "faces, edges and corners"],
                                     tooltip="Which neighbours touch: faces only, or also edges and corners.")
        self.distance = FloatSpinBox(label="join closer than", min=1e-6, max=1e9, value=10.0, step=0.5,
                                     tooltip="Points: two nuclei closer than this (world units) are in one cluster.")
        self.run_button = PushButton(text="Label and count", tooltip="Count (and measure) in the chosen layer.")
        self.export_button = PushButton(text="Export table…", enabled=False,
                                        tooltip="Save every row of the measurements as CSV.")
        self.status = Status()
        self.table_button = PushButton(text="Show table", enabled=False, tooltip=(
            "Show the measurements in napari's features table below the canvas (every row and column, sortable, "
            "resizable; it follows the selected layer)."))
        buttons = Container(widgets=[self.run_button, self.export_button, self.table_button], layout="horizontal",
                            labels=False)
        super().__init__(napari_viewer, [self.layer, self.intensity, self.threshold, self.connectivity,
                                         self.distance, buttons, self.status], run_button=self.run_button)
        self._measured = None  # the layer whose features hold the last measurements
        self.table_button.changed.connect(lambda: self._measured is not None and self.show_table(self._measured))
        self.features = None
        self._note = ""  # what the last run left out, for its status line
        self.run_button.changed.connect(self.run)
        self.export_button.changed.connect(lambda: self.export())
        self.layer.changed.connect(self._on_layer_changed)
        self._on_layer_changed()

    def _on_layer_changed(self, *_):
        layer = self.layer.value
        self.threshold.enabled = isinstance(layer, Image)
        self.connectivity.enabled = isinstance(layer, Image)
        self.distance.enabled = isinstance(layer, Points)
        if isinstance(layer, Image) and not layer.rgb:
            from skimage.filters import threshold_otsu

            sample = layer_sample(layer.data, multiscale=layer.multiscale)  # a few chunks of a lazy image, not all
            self.threshold.value = float(threshold_otsu(sample)) if sample.min() < sample.max() else float(sample.min())
        source = source_name(layer.name, LABELS) if isinstance(layer, Labels) else None
        if source is not None:
            if source in self.viewer.layers and isinstance(self.viewer.layers[source], Image):
                self.intensity.value = self.viewer.layers[source]
        unit = unit_label(layer.units, layer.metadata, layer.scale) if layer is not None else "px"
        self.distance.label = f"join closer than ({unit})"

    def run(self):
        layer = self.layer.value
        if layer is None or (isinstance(layer, Image) and layer.rgb):
            return self.status.show("Choose a Labels, a grey-level Image or a Points layer.", error=True)
        if isinstance(layer, Points):
            points, distance, spacing = np.asarray(layer.data), self.distance.value, tuple(layer.scale)
            self.start(lambda job: cluster_points(points, distance=distance, spacing=spacing),
                       lambda result: self._show_clusters(layer, result), desc="Clustering nuclei", inputs=(layer,))
            return
        data = layer.data[0] if layer.multiscale else layer.data  # read in the worker: the GUI never waits on it
        self._note = ""
        intensity_layer = self.intensity.value
        intensity = None
        if isinstance(intensity_layer, Image):  # a pyramid: its finest level; RGB: a mean per channel (_c0.._c2)
            finest = intensity_layer.data[0] if intensity_layer.multiscale else intensity_layer.data
            spatial = finest.shape[:-1] if intensity_layer.rgb else finest.shape
            intensity = finest if tuple(spatial) == tuple(data.shape) else None
            if intensity is None:
                self._note = (f"; no intensities: '{intensity_layer.name}' is {'x'.join(map(str, spatial))} pixels, "
                              f"'{layer.name}' {'x'.join(map(str, data.shape))}")
        if intensity is None and isinstance(layer, Image):
            intensity = data
        spacing, translate, units = tuple(layer.scale), tuple(layer.translate), unit_name(layer.units)
        threshold, connectivity = self.threshold.value, (1 if self.connectivity.value == "faces" else data.ndim)
        known = self._detection_of(layer)  # score and cluster id of the nucleus' detected point, where known

        def work(job):
            pixels = np.asarray(data)
            labels = pixels if isinstance(layer, Labels) else _backend.to_host(
                label(pixels > threshold, connectivity=connectivity).labels)
            job.check()
            if not isinstance(layer, Labels):
                warm_labels_display(labels)  # a new Labels layer follows
            return labels, measure_labels(labels, intensity=None if intensity is None else np.asarray(intensity),
                                          spacing=spacing, translate=translate, units=units, **known)

        self.status.show("working…")
        inputs = (layer,) + ((intensity_layer,) if intensity_layer is not None else ())
        self.start(work, lambda result: self._show_labels(layer, *result), desc="Measuring nuclei", inputs=inputs)

    def _detection_of(self, layer) -> dict:
        """The points, scores and cluster ids of ``nuclei: <image>`` for ``labels: <image>``, in its pixels."""
        source = source_name(layer.name, LABELS) if isinstance(layer, Labels) else None
        if source is None:
            return {}
        name = result_name(NUCLEI, source)
        points = self.viewer.layers[name] if name in self.viewer.layers else None
        if not isinstance(points, Points) or len(points.data) == 0 or points.ndim != layer.ndim:
            return {}
        known = {"points": world_to_pixels(points, layer)}
        if "score" in points.features:
            known["scores"] = np.asarray(points.features["score"], dtype=np.float64)
        if "cluster" in points.features:
            known["cluster_ids"] = np.asarray(points.features["cluster"], dtype=np.float64)
        return known if len(known) > 1 else {}

    def _show_labels(self, layer, labels, table):
        if isinstance(layer, Labels):
            target = layer
        else:
            target = show_result(self.viewer, result_name(COMPONENTS, layer.name), labels,
                                 **spatial_transform(layer, labels.ndim))
        features = {"index": table["label"], **table}
        target.features = features
        self.features = features
        count = len(table["label"])
        self.status.show(f"{count:,} nuclei (labels) in '{target.name}'; measurements in its features table"
                         + self._note)
        self._fill_table(features, target)

    def _show_clusters(self, layer, result):
        cluster_id = np.asarray(result.cluster) + 1  # ids from 1, like labels
        size = np.asarray(result.sizes)[np.asarray(result.cluster)]
        layer.features = layer.features.assign(cluster=cluster_id, cluster_size=size)
        # clusters of several nuclei in distinct colours, single nuclei grey
        colors = np.tile(SINGLE_COLOR, (len(cluster_id), 1))
        multi = size > 1
        if multi.any():
            from napari.utils.colormaps import label_colormap

            colors[multi] = label_colormap(max(int(cluster_id.max()), 2)).map(cluster_id[multi] % 49 + 1)
        if len(colors):  # napari warns ("illegal values, resetting ... to white") on an empty colour array
            layer.face_color = colors
        layer.refresh()
        n_multi = int((np.asarray(result.sizes) > 1).sum())
        self.status.show(f"{result.n_clusters:,} clusters ({n_multi} of more than one nucleus, coloured; "
                         "single nuclei grey)")
        self.features = {"cluster": np.arange(1, result.n_clusters + 1), "size": np.asarray(result.sizes)}
        self._fill_table(self.features, layer)

    def _fill_table(self, features, layer):
        self._measured = layer
        self.export_button.enabled = self.table_button.enabled = True
        self.show_table(layer)

    def show_table(self, layer):
        """The measurements in napari's features table, docked below the canvas (:mod:`._measurements_dock`)."""
        from ._measurements_dock import show_measurements

        if layer in self.viewer.layers:
            return show_measurements(self.viewer, layer, self)
        return None

    def export(self, path: str | None = None):
        if self.features is None:
            return self.status.show("Nothing to export yet: run Label and count first.", error=True)
        if not path:
            from qtpy.QtWidgets import QFileDialog

            path, _ = QFileDialog.getSaveFileName(self.native, "Export measurements", "measurements.csv",
                                                  "CSV (*.csv)")
        if not path:
            return None
        columns = [key for key in self.features if key != "index"]

        def write(tmp):
            with open(tmp, "w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh, lineterminator="\n")
                writer.writerow(columns)
                writer.writerows(zip(*(np.asarray(self.features[c]).tolist() for c in columns)))

        written = write_atomic(path, write)
        self.status.show(f"exported {len(self.features[columns[0]])} rows to {written}")
        return written
