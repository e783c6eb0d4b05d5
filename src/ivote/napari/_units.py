"""The unit of a napari layer, named in one place (Qt-free): a short ASCII name for files and
tables (``'um'``), a label for the widgets (``'µm'``, ``'px'``, ``'world units'``)."""

from __future__ import annotations

import numpy as np

__all__ = ["is_micrometre", "unit_label", "unit_name"]

_NOT_UNITS = ("", "pixel", "pixels", "px", "world", "world units", "none")  # 'world (units)': a scale, no unit
_SHORT = {"µm": "um", "μm": "um", "micrometer": "um", "micrometre": "um", "micron": "um", "microns": "um",
          "nanometer": "nm", "nanometre": "nm", "millimeter": "mm", "millimetre": "mm"}
_LABEL = {"um": "µm"}


def unit_name(units) -> str | None:
    """The short name of a unit, or of a layer's units (its last axis's): ``'um'``, ``'nm'``,
    ``'mm'``, any other name as given; None for pixels or no unit.

    >>> unit_name(("micrometer", "micrometer")), unit_name("µm"), unit_name(("pixel",)), unit_name(None)
    ('um', 'um', None, None)
    """
    if units is None:
        return None
    names = [str(u) for u in np.atleast_1d(np.asarray(units, dtype=object))]
    name = names[-1].strip() if names else ""
    return None if name.lower() in _NOT_UNITS else _SHORT.get(name, name)


def is_micrometre(units) -> bool:
    """Whether ``units`` (a name, or a layer's units) is the micrometre, in any spelling."""
    return unit_name(units) == "um"


def unit_label(units, metadata: dict | None = None, scale=()) -> str:
    """The unit for a widget's labels: the layer's ``units``, else ``metadata['units']`` (what our
    readers and sample data set), else ``'px'`` when the scale is 1, else ``'world units'``.

    >>> unit_label(("micrometer",) * 2), unit_label(("pixel",) * 2, {"units": "micron"}), unit_label(None, None, (2, 2))
    ('µm', 'µm', 'world units')
    """
    meta = (metadata or {}).get("units")
    name = unit_name(units) or (unit_name(meta) if isinstance(meta, str) else None)
    if name:
        return _LABEL.get(name, name)
    return "px" if all(float(s) == 1.0 for s in scale) else "world units"
