"""What the four magicgui dock widgets share: their base (:class:`DockWidget`), layer choices, status line,
transforms, result layers."""

from __future__ import annotations

from functools import partial

import numpy as np
from magicgui.widgets import Container, Label
from napari.layers import Image

STACK_KINDS = ("filters", "feature maps", "preview")  # Learn features' stacks, Detect's preview: never inputs
ERROR_STYLE = "color: #e0533e;"


def layer_choices(viewer, kind, *, exclude_stacks: bool = True):
    """A magicgui ``choices`` callable: the viewer's layers of ``kind`` as (name, layer), newest first."""

    def choices(_widget=None):
        layers = [layer for layer in reversed(getattr(viewer, "layers", ())) if isinstance(layer, kind)]
        if exclude_stacks:
            layers = [layer for layer in layers if layer.metadata.get("ivote_kind") not in STACK_KINDS]
        return [(layer.name, layer) for layer in layers]

    return choices


def follow_layer_list(container: Container, viewer):
    """Refresh the container's layer combo boxes when layers are added, removed or renamed."""

    def reset(*_):
        container.reset_choices()

    for event in (viewer.layers.events.inserted, viewer.layers.events.removed):
        connect_while_docked(container, event, reset)


def connect_while_docked(container: Container, emitter, callback):
    """Connect ``callback`` to a viewer's event ``emitter`` until the widget is gone (undocked or deleted),
    so a closed widget is never called by the viewer it left."""
    from ._runner import watch_gone

    emitter.connect(callback)
    watch_gone(container.native).callbacks.append(partial(_disconnect, emitter, callback))


def _disconnect(emitter, callback):
    try:
        emitter.disconnect(callback)
    except (RuntimeError, ValueError, TypeError):  # a closed viewer's emitters may be gone already
        pass


def set_range(slider, low: float, high: float):
    """Set a ranged widget's (min, max), in the order that never passes through min == max: magicgui's
    LogSlider divides by log(max / min) on each of the two assignments (a constant image's (1, 10) after
    the initial (1e-3, 1) did, aborting napari)."""
    if low >= slider.max:
        slider.max, slider.min = high, low
    else:
        slider.min, slider.max = low, high


def name_controls(owner):
    """Give every magicgui control held by ``owner`` its attribute's name, so ``container["radius"]`` finds it."""
    from magicgui.widgets.bases import Widget

    for attribute, widget in vars(owner).items():
        if isinstance(widget, Widget) and not attribute.startswith("_"):
            unlabelled = not widget._label
            widget.name = attribute
            if unlabelled and isinstance(widget, (Status, Container)):
                widget.label = ""  # a status line or a panel: the whole row, no label column


def keep_compact(container: Container, max_height: int = 520):
    """Keep a dock widget compact: napari docks ``container.native`` without magicgui's scroll area,
    so a tall widget would push the others off a 1080-pixel screen; tables scroll inside themselves."""
    from magicgui.widgets import Table

    for widget in container:
        if isinstance(widget, Table):
            widget.native.setMaximumHeight(max_height // 2)


class DockWidget(Container):
    """The set-up the four docks share, so that each widget holds only its own form and calls.

    Its controls are named after their attributes; the backend label comes last; the dock stays compact and
    tabs with the plugin's other docks; layer choices follow the layer list; ``self.runner`` runs its core
    calls (:class:`~ivote.napari._runner.Runner`), and :meth:`start` and :meth:`cancel` switch the Run and
    Cancel buttons given here for the duration of a job. The subclass sets its controls (``self.status``
    among them) before calling ``super().__init__``.
    """

    def __init__(self, napari_viewer, widgets, *, run_button=None, cancel_button=None):
        from ._runner import Runner

        self.viewer = napari_viewer
        self.backend_label = BackendLabel()
        self._buttons = (run_button, cancel_button)
        name_controls(self)
        super().__init__(widgets=[*widgets, self.backend_label])
        keep_compact(self)
        tab_with_siblings(self.native)
        self.runner = Runner(napari_viewer, self.native, self.status.show)
        follow_layer_list(self, napari_viewer)

    @property
    def busy(self) -> bool:
        return self.runner.busy

    def start(self, work, on_result, *, desc: str, total: int = 0, inputs=()):
        """``self.runner.start``, with Run off and Cancel on until the job ends."""
        self._running(True)
        return self.runner.start(work, on_result, desc=desc, total=total, inputs=inputs,
                                 on_end=lambda: self._running(False))

    def cancel(self):
        self.runner.cancel()
        self._running(False)

    def _running(self, running: bool):
        run_button, cancel_button = self._buttons
        if run_button is not None:
            run_button.enabled = not running
        if cancel_button is not None:
            cancel_button.enabled = running


def polarity_for(polarity, rgb: bool, grey_choice: str) -> str:
    """Set a dock's polarity control for an image: RGB is read as H&E (the haematoxylin stain, dark in the image),
    so 'dark', greyed out; a grey image gets back the choice made for grey images before the RGB one (it kept
    'dark', and a fluorescence image was then searched for dark nuclei). Returns the grey choice to remember."""
    if rgb:
        if polarity.enabled:
            grey_choice = polarity.value
        polarity.value, polarity.enabled = "dark", False
    else:
        if not polarity.enabled:
            polarity.value = grey_choice
        polarity.enabled = True
    return grey_choice


def show_result(viewer, name: str, data, layer_type: str = "labels", **attributes):
    """Put a dock's result into the layer ``name``: its data and ``attributes`` (e.g. the image's
    transform) replace those of the layer of that name and type, else a new layer is added (a Labels
    layer then saves as OME-TIFF with its pixel sizes: ``prefer_ivote_writers``). Returns the layer."""
    layer = viewer.layers[name] if name in viewer.layers else None
    if layer is not None and type(layer).__name__.lower() == layer_type:
        layer.data = data
        for key, value in attributes.items():
            setattr(layer, key, value)
        return layer
    if layer is not None:
        viewer.layers.remove(layer)
    if layer_type == "labels":
        from ._writer_order import prefer_ivote_writers

        prefer_ivote_writers()
    return getattr(viewer, f"add_{layer_type}")(data, name=name, **attributes)


def warm_labels_display(labels):
    """Load napari's compiled colouring of a Labels layer for ``labels``' dtype in this (worker) thread: napari
    compiles it (Numba, from its cache) on the first Labels layer it draws, and on the main thread that froze the
    event loop for 1.5 s after the first segmentation."""
    try:
        from napari.utils.colormaps import label_colormap
        from napari.utils.colormaps.colormap import _cast_labels_data_to_texture_dtype_auto
    except ImportError:  # another napari: nothing to warm
        return
    tile = np.ascontiguousarray(np.asarray(labels)[(slice(0, 2),) * np.ndim(labels)])
    try:
        _cast_labels_data_to_texture_dtype_auto(tile, label_colormap())
    except Exception:  # noqa: BLE001 (an optimisation only: napari colours the layer anyway)
        pass


class BackendLabel(Label):
    """Where the computation runs (the GPU's name, or the CPU and its threads), word-wrapped so that a long
    name does not widen the dock and squeeze the canvas."""

    def __init__(self):
        from .. import _backend

        super().__init__(label="backend", value=_backend.backend_name(),
                         tooltip="Where the computation runs (GPU through CuPy, or the CPU).")
        self.native.setWordWrap(True)
        self.native.setMinimumWidth(120)


STATUS_LINES = 3
"""Lines a status shows at most (the dock stays put); the whole text is its tooltip."""


class Status(Label):
    """A word-wrapped status line of at most :data:`STATUS_LINES` lines that turns red for errors."""

    def __init__(self):
        super().__init__(value="", label="")
        self.native.setWordWrap(True)
        self.native.setMinimumWidth(120)
        metrics = self.native.fontMetrics()
        self.native.setMaximumHeight(STATUS_LINES * metrics.lineSpacing() + 4)

    def show(self, text: str, error: bool = False):
        self.value = text
        self.native.setStyleSheet(ERROR_STYLE if error else "")
        self.tooltip = text or None


def spatial_transform(layer, ndim: int) -> dict:
    """The layer's own transform (scale, translate, rotate, shear, affine) restricted to its last ``ndim`` axes.

    A layer given these keywords sits exactly on ``layer``: a pixel index of the
    image is the same data coordinate in the new layer, rotated, sheared or
    affine-transformed layers included.
    """
    full = layer.ndim
    if full == ndim:
        return {"scale": layer.scale, "translate": layer.translate, "rotate": layer.rotate,
                "shear": layer.shear, "affine": layer.affine.affine_matrix, "units": layer.units}
    keep = slice(full - ndim, full)
    # a sub-space of the transform: only valid when the extra axes do not mix with the spatial ones
    affine = np.asarray(layer.affine.affine_matrix)
    sub_affine = np.eye(ndim + 1)
    sub_affine[:ndim, :ndim] = affine[keep, keep]
    sub_affine[:ndim, ndim] = affine[keep, full]
    rotate = np.asarray(layer.rotate)[keep, keep]
    return {"scale": layer.scale[keep], "translate": layer.translate[keep], "rotate": rotate,
            "shear": _upper_shear(np.asarray(layer.shear), full)[keep, keep], "affine": sub_affine,
            "units": tuple(layer.units)[keep]}


def _upper_shear(shear, ndim):
    if shear.ndim == 2:
        return shear
    matrix = np.eye(ndim)
    matrix[np.triu_indices(ndim, 1)] = shear
    return matrix


def world_to_pixels(points_layer, image: Image) -> np.ndarray:
    """Coordinates of a Points layer in the pixel (data) coordinates of ``image``, through both layers' transforms."""
    data = np.asarray(points_layer.data, dtype=np.float64)
    if len(data) == 0:
        return data.reshape(0, image.ndim)
    world = np.stack([np.asarray(points_layer.data_to_world(p), dtype=np.float64) for p in data])
    pixels = np.stack([np.asarray(image.world_to_data(w), dtype=np.float64) for w in world])
    return pixels


def short_title(title: str) -> str:
    """A dock's title without napari's " (<plugin name>)" suffix, for a tab.

    >>> short_title("Detect nuclei (IVote nuclei)"), short_title("Segment nuclei (napari-ivote)")
    ('Detect nuclei', 'Segment nuclei')
    """
    for suffix in (" (IVote nuclei)", " (napari-ivote)"):  # the plugin's display name, or its package name
        if title.endswith(suffix):
            return title[: -len(suffix)]
    return title


def tab_with_siblings(native):
    """When docked and first shown, stack this widget as a tab of an already docked napari-ivote widget.

    Four docks one above the other do not fit a 1080-pixel screen; tabs do.
    The user can drag a tab out again.
    """
    from qtpy.QtCore import QEvent, QObject
    from qtpy.QtWidgets import QDockWidget, QMainWindow

    native.setProperty("ivote_widget", True)

    class _Tabber(QObject):
        def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Type.Show:
                obj.removeEventFilter(self)
                dock, window = obj.parent(), obj.window()
                if isinstance(dock, QDockWidget) and isinstance(window, QMainWindow):
                    area = window.dockWidgetArea(dock)
                    for other in window.findChildren(QDockWidget):
                        inner = other.widget()
                        if (other is not dock and inner is not None and inner.property("ivote_widget")
                                and other.isVisible() and window.dockWidgetArea(other) == area):
                            window.tabifyDockWidget(other, dock)
                            for tabbed in (other, dock):  # "Detect nuclei", not a cut "Detect nuclei (IVote..."
                                tabbed.setWindowTitle(short_title(tabbed.windowTitle()))
                            dock.raise_()
                            break
            return False

    tabber = _Tabber(native)  # a child: lives and dies with the widget
    native.installEventFilter(tabber)
