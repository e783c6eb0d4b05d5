"""The one call the widgets make to measure nuclei (Qt-free): :func:`ivote.measure_nuclei`."""

from __future__ import annotations

import numpy as np

__all__ = ["measure_labels"]


def measure_labels(labels, *, intensity=None, spacing=None, translate=None, units=None, points=None,
                   scores=None, cluster_ids=None) -> dict[str, np.ndarray]:
    """Per-nucleus measurements in physical units, one row per label (see :func:`ivote.measure_nuclei`).

    A layer in pixels (no unit, scale 1) is measured in pixels (``area_px2``); a
    scale without a unit in ``world`` units (``area_world2``).
    """
    from ..measure import measure_nuclei

    if units is None:
        if spacing is not None and any(float(s) != 1.0 for s in spacing):
            units = "world"
        else:
            spacing = None
    return measure_nuclei(labels, intensity, spacing=spacing, translate=translate, units=units, points=points,
                          scores=scores, cluster_ids=cluster_ids)
