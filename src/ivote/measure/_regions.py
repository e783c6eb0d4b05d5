"""Nuclei per annotated region (QuPath annotations such as 'Tumor' and 'Stroma'): counts and densities per mm²."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["count_in_regions", "region_of_points"]


def _regions(regions):
    """Regions as given, or read from a GeoJSON path."""
    if isinstance(regions, (str, bytes)) or hasattr(regions, "__fspath__"):
        from ..export._geojson import read_regions_geojson

        return read_regions_geojson(regions)
    return list(regions)


def _pixel_area_mm2(spacing, units) -> float:
    from .._units import to_micrometres

    if spacing is None:
        raise ValueError("counting nuclei per mm² needs the pixel size: give spacing (e.g. --spacing 0.25 0.25, "
                         "micrometres) or an image whose metadata has its pixel sizes")
    spacing = tuple(float(s) for s in spacing)
    if len(spacing) != 2:
        raise ValueError(f"regions are 2D: spacing must be (Y, X); got {spacing}")
    sizes = [to_micrometres(s, units) for s in spacing]
    if any(s is None for s in sizes):
        raise ValueError(f"spacing must be positive lengths in a known unit (um, nm, mm...); got {spacing} {units!r}")
    return sizes[0] * sizes[1] / 1e6


def _inside(points: np.ndarray, geometry) -> np.ndarray:
    import shapely

    if len(points) == 0:
        return np.zeros(0, dtype=bool)
    return shapely.intersects_xy(geometry, points[:, 1], points[:, 0])  # shapely's x is the column


def region_of_points(points, regions) -> np.ndarray:
    """The name of the smallest region holding each point ('' outside every region).

    ``points`` are ``(y, x)`` pixel coordinates (pixel centres on integers); ``regions``
    :func:`ivote.export.read_regions_geojson`'s, or the path of a GeoJSON file. The smallest
    holding region is the most specific one where annotations nest (a tumour inside tissue).
    """
    points = _check_points(points)
    regions = _regions(regions)
    names = np.full(len(points), "", dtype=object)
    best = np.full(len(points), math.inf)
    for region in regions:
        inside = _inside(points, region.geometry) & (region.geometry.area < best)
        names[inside], best[inside] = region.name, region.geometry.area
    return names


def _check_points(points) -> np.ndarray:
    points = np.asarray(points, dtype=np.float64)
    if points.size == 0:
        return points.reshape(0, 2)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"regions are 2D: points must be an (N, 2) array of (y, x) pixel coordinates; got shape "
                         f"{points.shape}")
    return points


def count_in_regions(points, regions, *, spacing, units: str = "um") -> dict[str, np.ndarray]:
    """Count the nuclei in each annotated region and their density per mm².

    Parameters
    ----------
    points : (N, 2) array_like
        Nucleus positions (centroids or detections), ``(y, x)`` pixel coordinates of the
        image the regions were drawn on (level 0).
    regions : list of Region, or path
        :func:`ivote.export.read_regions_geojson`'s regions (one per QuPath class or name), or
        the path of a GeoJSON file of annotations.
    spacing : (Y, X) float
        Pixel size, in ``units``; required for the areas.
    units : str
        Unit of ``spacing`` (default micrometres).

    Returns
    -------
    dict of str to array
        One row per region, in file order: ``region`` (name), ``nuclei`` (count of points the
        region covers, its boundary included; a point in two overlapping regions counts in
        both), ``area_mm2`` and ``nuclei_per_mm2``.

    Examples
    --------
    >>> from shapely.geometry import box
    >>> from ivote.export import Region
    >>> table = count_in_regions([[5, 5], [5, 50], [60, 60]], [Region("tumour", box(0, 0, 99, 49))],
    ...                          spacing=(0.5, 0.5))
    >>> int(table["nuclei"][0]), round(float(table["area_mm2"][0]), 8), round(float(table["nuclei_per_mm2"][0]))
    (2, 0.00121275, 1649)
    """
    points = _check_points(points)
    pixel_mm2 = _pixel_area_mm2(spacing, units)
    regions = _regions(regions)
    counts = np.array([int(_inside(points, r.geometry).sum()) for r in regions], dtype=np.int64)
    areas = np.array([r.geometry.area * pixel_mm2 for r in regions], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        density = np.where(areas > 0, counts / areas, np.nan)
    return {"region": np.array([r.name for r in regions], dtype=object), "nuclei": counts, "area_mm2": areas,
            "nuclei_per_mm2": density}
