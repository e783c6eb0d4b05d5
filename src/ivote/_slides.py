"""Whole-slide images: SVS, NDPI and pyramidal (OME-)TIFF, read lazily tile by tile.

A whole slide is a tiled, usually JPEG-compressed, pyramidal TIFF: level 0 at the
scanner's resolution (often 100,000 x 80,000 RGB pixels, 24 GB decoded) and smaller
levels for viewing. The reader is tifffile's own: its series give every level of
an Aperio SVS, a Hamamatsu NDPI, a pyramidal OME-TIFF (SubIFDs) and a generic
pyramidal TIFF, and :meth:`tifffile.TiffPageSeries.aszarr` serves a level as a
Zarr store that decodes only the tiles a slice touches. tiffslide (an OpenSlide
work-alike) is built on the same tifffile calls and would add fsspec and a second
metadata layer for the same four formats; tifffile is already a dependency and is
the reference decoder of these formats (it is what bioio's TIFF readers call).

:func:`slide_levels` gives the levels as Dask arrays whose chunks are whole
tiles (grown to about :data:`CHUNK` pixels per side), so that a block-by-block
engine reads only the tiles of its block; :func:`slide_spacing` gives the pixel
size in micrometres (the microns per pixel, mpp) from the file's metadata:
Aperio's ``MPP`` in the image description, else the resolution tags in
centimetres (NDPI, generic TIFF; OME-TIFF's ``PhysicalSize`` is read by
:mod:`ivote._files`).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np

__all__ = ["CHUNK", "SLIDE_SUFFIXES", "TiffLevel", "is_tiled", "pyramid_of", "slide_levels", "slide_spacing"]

SLIDE_SUFFIXES = (".svs", ".ndpi")
#: target chunk side of the Dask arrays, in pixels: a whole number of tiles
CHUNK = 1024


def is_tiled(series) -> bool:
    """Whether a tifffile series is stored in tiles (a slide, or any image written tile by tile)."""
    pages = getattr(series, "pages", None) or []
    page = pages[0] if pages else None
    return bool(page is not None and getattr(page, "is_tiled", False))


def slide_levels(path, series_index: int = 0) -> list:
    """The pyramid of a tiled TIFF series as lazy Dask arrays, level 0 first.

    Parameters
    ----------
    path : path-like
        SVS, NDPI, OME-TIFF or TIFF file.
    series_index : int
        The tifffile series (scene); 0 is the baseline image of a slide.

    Returns
    -------
    list of dask.array.Array
        One per level, in the series' stored axes (``YXS`` for RGB), chunked by
        whole tiles (:class:`TiffLevel`). Reads from several threads take turns
        on the file (one lock per level) and decode in parallel.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tifffile
    >>> path = os.path.join(tempfile.mkdtemp(), "slide.tif")
    >>> rgb = np.full((512, 384, 3), 230, np.uint8)
    >>> with tifffile.TiffWriter(path) as tif:
    ...     tif.write(rgb, tile=(128, 128), photometric="rgb", subifds=1)
    ...     tif.write(rgb[::2, ::2], tile=(128, 128), photometric="rgb", subfiletype=1)
    >>> [level.shape for level in slide_levels(path)]
    [(512, 384, 3), (256, 192, 3)]
    """
    import dask.array as da
    import tifffile

    path = Path(path)
    with tifffile.TiffFile(str(path)) as tif:
        n_levels = len(tif.series[series_index].levels)
    stamp = path.stat().st_mtime_ns
    levels = []
    for level in range(n_levels):
        tiles = TiffLevel(path, series_index, level)
        name = f"ivote-slide-{path.name}-{stamp}-{series_index}-{level}"
        _TILES[name] = tiles
        levels.append(da.from_array(tiles, chunks=_tile_chunks(tiles.chunks, tiles.shape), lock=False,
                                    asarray=True, name=name, meta=np.empty((0,) * len(tiles.shape), tiles.dtype)))
    return levels


_TILES: dict = {}  # Dask array name -> its TiffLevel (tile_reader)


def tile_reader(array):
    """The :class:`TiffLevel` behind a Dask array of :func:`slide_levels` (not sliced or transformed since),
    which reads a region by decoding only the tiles it touches rather than whole Dask chunks; else None."""
    return _TILES.get(getattr(array, "name", None)) if hasattr(array, "dask") else None


class TiffLevel:
    """One level of a tiled TIFF series as a sliceable array: ``level[region]`` decodes the
    tiles the region touches (tifffile's Zarr store). It opens the file on first use, in
    each process (it pickles as its path, for Dask's worker processes)."""

    def __init__(self, path, series_index: int, level: int):
        self.path, self.series_index, self.level = str(path), int(series_index), int(level)
        self._lock = threading.Lock()
        self._zarr = None
        array = self._array()
        self.shape, self.dtype, self.chunks = tuple(array.shape), np.dtype(array.dtype), tuple(array.chunks)
        self.ndim = len(self.shape)

    def _array(self):
        with self._lock:
            if self._zarr is None:
                import tifffile
                import zarr

                tif = tifffile.TiffFile(self.path)
                store = tif.series[self.series_index].aszarr(level=self.level, lock=threading.RLock())
                self._zarr = zarr.open_array(store, mode="r")
            return self._zarr

    def __getitem__(self, key) -> np.ndarray:
        return np.asarray(self._array()[key])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_zarr"], state["_lock"] = None, None
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _tile_chunks(tile, shape) -> tuple:
    """Chunks of whole tiles, about :data:`CHUNK` pixels along Y and X (other axes whole)."""
    chunks = []
    for axis, (t, n) in enumerate(zip(tile, shape)):
        spatial = axis >= len(shape) - 3 and n > 4 and t < n
        chunks.append(min(n, max(1, round(CHUNK / t)) * t) if spatial else n)
    return tuple(chunks)


def slide_spacing(path, series_index: int = 0) -> dict:
    """Pixel size of level 0 in micrometres, ``{'Y': ..., 'X': ...}`` (empty when unknown).

    Aperio SVS: ``MPP`` in the image description (``|MPP = 0.2520|``); otherwise
    the X/YResolution tags when their unit is the centimetre (NDPI, most
    scanners' TIFF); a resolution in inches is a printer's, not a scanner's,
    and is not read.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tifffile
    >>> path = os.path.join(tempfile.mkdtemp(), "slide.tif")
    >>> tifffile.imwrite(path, np.zeros((64, 64, 3), np.uint8), tile=(32, 32), photometric="rgb",
    ...                  resolution=(1e4 / 0.25, 1e4 / 0.25), resolutionunit="CENTIMETER")
    >>> slide_spacing(path)
    {'Y': 0.25, 'X': 0.25}
    """
    import tifffile
    from tifffile.tifffile import svs_description_metadata

    with tifffile.TiffFile(str(path)) as tif:
        page = tif.series[series_index].pages[0]
        description = getattr(page, "description", "") or ""
        if tif.is_svs or description.startswith("Aperio"):
            try:
                mpp = float(svs_description_metadata(description).get("MPP", "nan"))
            except (ValueError, TypeError):
                mpp = math.nan
            if math.isfinite(mpp) and mpp > 0:
                return {"Y": mpp, "X": mpp}
        return _centimetre_resolution(page)


def _centimetre_resolution(page) -> dict:
    """The plain TIFF's centimetre resolution tags (``_files._metadata._resolution_spacing``), where they
    give a finite, positive pixel size."""
    from ._files._metadata import _resolution_spacing  # here: _files imports this module

    return {axis: float(size) for axis, size in _resolution_spacing(page).items() if np.isfinite(size) and size > 0}


def pyramid_of(image) -> list:
    """The levels of an ``ivote.ImageFile`` read at level 0 of a tiled TIFF pyramid: ``[image.data, level 1,
    ...]`` (Dask arrays in the image's axes); ``[image.data]`` for any other image."""
    import tifffile

    path = Path(image.path or "")
    if not path.name.lower().endswith((".tif", ".tiff", ".btf", *SLIDE_SUFFIXES)) or not path.is_file():
        return [image.data]
    try:
        with tifffile.TiffFile(str(path)) as tif:
            names = [s.name or f"Image:{i}" for i, s in enumerate(tif.series)]
            index = names.index(image.scene) if image.scene in names else 0
            series = tif.series[index]
            if not is_tiled(series) or len(series.levels) < 2 or tuple(series.shape) != image.shape:
                return [image.data]
    except (OSError, ValueError, IndexError):
        return [image.data]
    levels = slide_levels(path, index)
    return [image.data] + [level for level in levels[1:] if level.ndim == len(image.shape)]


def is_slide_file(path) -> bool:
    """Whether ``path`` names a vendor slide format (SVS, NDPI) by its suffix."""
    return Path(path).name.lower().endswith(SLIDE_SUFFIXES)
