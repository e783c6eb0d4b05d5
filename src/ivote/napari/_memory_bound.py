"""The core's memory bound of a detection, as the Detect dock uses it (Qt-free): the radius slider stops at
the largest radius that fits, and a preview or Run the bound refuses is never started.

The bound is :func:`ivote.detect.detection_memory` and :func:`ivote.detect.largest_radius` (the memory a
detection of a shape at a radius allocates, on the backend the detection would run on, against
``IVOTE_MAX_MEMORY`` or the GPU's free memory). Where the core has no such estimate, nothing is bounded here
and the core's own checks still refuse what they refuse.
"""

from __future__ import annotations

__all__ = ["largest_radius", "refusal"]


def _core():
    try:
        from ..detect import detection_memory, largest_radius as core_largest
    except ImportError:
        return None
    return detection_memory, core_largest


def largest_radius(shape, spacing) -> float | None:
    """The largest radius (units of ``spacing``) a detection of spatial ``shape`` may use, or None when unknown."""
    core = _core()
    if core is None:
        return None
    return float(core[1](tuple(shape), spacing=tuple(spacing)))


def refusal(shape, radius: float, spacing, unit: str) -> str | None:
    """Why a detection of spatial ``shape`` at ``radius`` must not start (its memory is over the bound), with the
    largest radius that fits; None when it may."""
    core = _core()
    if core is None:
        return None
    detection_memory, core_largest = core
    largest = float(core_largest(tuple(shape), spacing=tuple(spacing)))
    if radius <= largest * (1 + 1e-9):
        return None
    from .._limits import format_bytes

    needed = detection_memory(tuple(shape), radius, spacing=tuple(spacing))
    size = "x".join(str(int(n)) for n in shape)
    if largest <= 0:
        return (f"not started: a detection of {size} pixels needs more memory than the limit allows at any radius "
                "(IVOTE_MAX_MEMORY); use a crop of the image.")
    return (f"not started: radius {radius:.3g} {unit} on {size} pixels needs about {format_bytes(needed)}, more "
            f"than the memory limit (IVOTE_MAX_MEMORY); the largest radius that fits is {largest:.3g} {unit}.")
