"""Where Label and count's measurements are shown: napari's own features-table widget in a dock below the
canvas (every row and column, sortable, resizable, "Save as CSV..."), on the measured layer; a plain table
where this napari has no such widget."""

from __future__ import annotations

DOCK_NAME = "Measurements"


def _features_table(viewer):
    try:
        from napari_builtins._qt.features_table import FeaturesTable
    except ImportError:  # an older napari: a table of the layer's features, in the same place
        return None
    return FeaturesTable(viewer)


def show_measurements(viewer, layer, owner):
    """Dock (once per ``owner``, the Label and count widget) the features table below the canvas and show
    ``layer``'s features in it (napari's table follows the active layer). Returns the table widget."""
    table = getattr(owner, "_measurements_table", None)
    if table is None or not _alive(table):
        table = _features_table(viewer)
        if table is None:
            from magicgui.widgets import Table

            table = Table(value=layer.features.to_dict("list"))
            native = table.native
        else:
            native = table
        dock = viewer.window.add_dock_widget(native, name=DOCK_NAME, area="bottom")
        owner._measurements_table, owner._measurements_dock = table, dock
    elif hasattr(table, "value"):  # the plain table: its rows now
        table.value = layer.features.to_dict("list")
    viewer.layers.selection.active = layer
    return table


def _alive(widget) -> bool:
    native = getattr(widget, "native", widget)
    try:
        native.objectName()
    except RuntimeError:  # its Qt side was deleted (the dock closed)
        return False
    return True

