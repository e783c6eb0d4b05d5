"""Length units: one table for the whole core.

File readers convert pixel sizes to micrometres (:func:`to_micrometres`); tables
name their physical columns after the unit's short ASCII symbol
(:func:`unit_symbol`: ``y_um``, ``area_um2``).
"""

from __future__ import annotations

import math

__all__ = ["to_micrometres", "unit_symbol"]

# length units -> micrometres (OME's UnitsLength symbols and names, ImageJ's spellings)
_UM_PER_UNIT = {
    "um": 1.0, "µm": 1.0, "μm": 1.0, "\\u00b5m": 1.0, "micron": 1.0, "microns": 1.0,
    "micrometer": 1.0, "micrometre": 1.0, "micrometers": 1.0,
    "nm": 1e-3, "nanometer": 1e-3, "nanometre": 1e-3,
    "pm": 1e-6, "picometer": 1e-6,
    "å": 1e-4, "angstrom": 1e-4, "ångström": 1e-4,
    "mm": 1e3, "millimeter": 1e3, "millimetre": 1e3,
    "cm": 1e4, "centimeter": 1e4, "centimetre": 1e4,
    "m": 1e6, "meter": 1e6, "metre": 1e6,
}
_SYMBOL = {1.0: "um", 1e-3: "nm", 1e-6: "pm", 1e-4: "A", 1e3: "mm", 1e4: "cm", 1e6: "m"}
_PIXELS = ("pixel", "pixels", "px")


def to_micrometres(value, unit) -> float | None:
    """``value`` in ``unit`` as micrometres; None for no value, pixels or an unknown unit.

    >>> to_micrometres(250, "nm"), to_micrometres(0.5, "micron"), to_micrometres(1, "pixel")
    (0.25, 0.5, None)
    """
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        return None
    key = "um" if unit is None else str(unit).strip().lower()
    factor = _UM_PER_UNIT.get(key)
    return None if factor is None else value * factor


def unit_symbol(units: str | None) -> str | None:
    """The short ASCII symbol used in column names; None for no unit.

    Pixels are ``px``; a unit this table does not know is kept as given.

    >>> unit_symbol("µm"), unit_symbol("micrometer"), unit_symbol("pixel"), unit_symbol("furlong")
    ('um', 'um', 'px', 'furlong')
    """
    if not units:
        return None
    key = str(units).strip().lower()
    if key in _PIXELS:
        return "px"
    factor = _UM_PER_UNIT.get(key)
    return units if factor is None else _SYMBOL[factor]
