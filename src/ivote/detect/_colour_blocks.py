"""H&E slides block by block: the hematoxylin density of any region, with slide-wide stain
vectors, intensity scale and tissue mask computed once.

The colour transform of :func:`ivote.detect.hematoxylin_density` is per pixel once its
three slide-wide inputs are fixed: the stain vectors (Ruifrok's, given, or Macenko's
fitted on the whole slide's fixed sample, :func:`slide_stain_vectors`), the intensity of
white (255 for uint8; else the slide's maximum rounded up to 1, 255 or 65535) and the
tissue mask. :class:`HematoxylinBlocks` holds them and reads any region of the slide as
its density, so that a block-by-block engine (``ivote.distributed.detect_chunked``,
``segment_chunked``) sees exactly the grey image the in-memory detection computes.

The tissue mask (:func:`tissue_mask`) sets glass to density 0, in memory and block by
block alike (:meth:`HematoxylinBlocks.whole` gives the in-memory signal). A block
whose region, halo included, holds no tissue is then constant: it has no gradient, no
voter and no vote, so its detection is known to find nothing and is skipped
(:meth:`HematoxylinBlocks.is_glass`), and its pixels are never read or decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._colour import (_MACENKO_MIN_DENSITY, _MACENKO_PERCENTILE, _MACENKO_SAMPLE, _fit_stain_vectors,
                      _optical_density, hematoxylin_density, rgb_full_scale)

__all__ = ["HematoxylinBlocks", "TissueMask", "hematoxylin_blocks", "slide_stain_vectors", "slide_tissue", "tissue_mask"]

#: level-0 pixels per side of a tissue-mask cell when the mask is made from level 0 itself
TISSUE_CELL = 32
#: cells by which the thresholded mask grows (so that no nucleus at the tissue's edge is cut)
TISSUE_MARGIN_CELLS = 2


def _compute(block) -> np.ndarray:
    """A NumPy copy of a region of a NumPy, Dask or Zarr array (Dask in this thread: the
    caller is often a task of a Dask scheduler already)."""
    if hasattr(block, "compute"):
        return np.asarray(block.compute(scheduler="sync"))
    return np.asarray(block)


def white_level(rgb) -> float:
    """The intensity of white of a whole RGB(A) slide: 255 for uint8, else the smallest of 1, 255
    and 65535 that holds the slide's maximum (:func:`ivote.detect._colour.rgb_full_scale`)."""
    if np.dtype(rgb.dtype) == np.uint8:
        return 255.0
    high = _compute(rgb[..., :3].max())
    return rgb_full_scale(np.asarray(high, dtype=np.float64).reshape(1))


def slide_stain_vectors(rgb, *, min_density: float = _MACENKO_MIN_DENSITY,
                        percentile: float = _MACENKO_PERCENTILE) -> np.ndarray:
    """Macenko's H&E vectors of a whole slide, read lazily: equal to
    :func:`ivote.detect.stain_vectors` of the slide in memory.

    The in-memory fit samples a fixed grid of the flattened image (every ``N // 2**18``-th
    pixel); here the same pixels are read from the NumPy, Dask or Zarr array (Dask and
    Zarr: point by point through ``vindex``, one pass over the tiles, never the slide).

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.detect import stain_vectors
    >>> stains = np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11]])
    >>> amounts = np.random.default_rng(0).uniform(0, 1.5, (64, 64, 2))
    >>> rgb = (255 * np.exp(-amounts @ (stains / np.linalg.norm(stains, axis=1, keepdims=True)))).astype(np.uint8)
    >>> bool(np.array_equal(slide_stain_vectors(rgb), stain_vectors(rgb)))
    True
    """
    if not 0 < percentile < 50:
        raise ValueError(f"percentile must satisfy 0 < percentile < 50; got {percentile!r}")
    height, width = (int(n) for n in rgb.shape[:2])
    total = height * width
    step = max(1, total // _MACENKO_SAMPLE)
    rows, cols = np.divmod(np.arange(0, total, step, dtype=np.int64), width)
    if isinstance(rgb, np.ndarray):
        sample = rgb[rows, cols, :3]
    else:
        sample = _compute(rgb.vindex[rows, cols])[:, :3]
    values = sample.astype(np.float64) / white_level(rgb)
    return _fit_stain_vectors(_optical_density(values, np), min_density, percentile)


@dataclass(frozen=True)
class TissueMask:
    """Where a slide holds tissue, on a grid of ``cell`` x ``cell`` level-0 pixels.

    ``cells[i, j]`` covers level-0 rows ``i * cell .. (i + 1) * cell - 1`` and the columns
    likewise; pixels past the grid's last cell take the last cell's value.
    """

    cells: np.ndarray
    cell: int

    def region(self, region) -> np.ndarray:
        """The mask over a (Y, X) region of level 0 (a tuple of two slices with starts and stops)."""
        (ys, xs) = region[:2]
        rows = np.minimum(np.arange(ys.start, ys.stop) // self.cell, self.cells.shape[0] - 1)
        cols = np.minimum(np.arange(xs.start, xs.stop) // self.cell, self.cells.shape[1] - 1)
        return self.cells[np.ix_(rows, cols)]

    def any(self, region) -> bool:
        """Whether the region holds any tissue (read from the cells it touches only)."""
        (ys, xs) = region[:2]
        last_row, last_col = self.cells.shape[0] - 1, self.cells.shape[1] - 1
        r0, r1 = min(ys.start // self.cell, last_row), min((ys.stop - 1) // self.cell, last_row)
        c0, c1 = min(xs.start // self.cell, last_col), min((xs.stop - 1) // self.cell, last_col)
        return bool(self.cells[r0:r1 + 1, c0:c1 + 1].any())

    @property
    def fraction(self) -> float:
        """Share of the cells that hold tissue."""
        return float(self.cells.mean()) if self.cells.size else 0.0


def tissue_mask(thumbnail, *, cell: int, min_density: float = _MACENKO_MIN_DENSITY,
                margin: int = TISSUE_MARGIN_CELLS) -> TissueMask:
    """Tissue against glass, from a low-resolution image of the slide.

    A thumbnail pixel is tissue when its optical density (natural log, Euclidean norm over
    R, G, B) reaches ``min_density``, the background level of Macenko's stain fit (glass is
    white: its density is a few hundredths); the mask then grows by ``margin`` cells and its
    holes are filled, so that pale cytoplasm, fat and the tissue's edge stay in. The rule is
    the stain fit's, not one fitted to slides.

    Parameters
    ----------
    thumbnail : (y, x, 3|4) array
        A pyramid level of the slide (or level 0 read every ``cell``-th pixel); uint8 or
        scaled like the slide (:func:`white_level`).
    cell : int
        Level-0 pixels per thumbnail pixel (the level's downsample, a positive integer).
    min_density, margin
        The threshold and the growth in cells.

    Examples
    --------
    >>> import numpy as np
    >>> slide = np.full((256, 256, 3), 240, np.uint8)
    >>> slide[64:128, 32:96] = (120, 60, 140)
    >>> mask = tissue_mask(slide[::32, ::32], cell=32, margin=0)
    >>> mask.any((slice(64, 128), slice(32, 96))), mask.any((slice(160, 256), slice(160, 256)))
    (True, False)
    """
    from scipy import ndimage

    if isinstance(cell, bool) or not isinstance(cell, (int, np.integer)) or cell < 1:
        raise ValueError(f"cell must be a positive integer (level-0 pixels per thumbnail pixel); got {cell!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, np.integer)) or margin < 0:
        raise ValueError(f"margin must be a non-negative integer (cells); got {margin!r}")
    thumbnail = _compute(thumbnail)
    if thumbnail.ndim != 3 or thumbnail.shape[-1] not in (3, 4):
        raise ValueError(f"thumbnail must be an RGB(A) image (y, x, 3|4); got shape {thumbnail.shape}")
    scale = 255.0 if thumbnail.dtype == np.uint8 else rgb_full_scale(thumbnail[..., :3].astype(np.float64))
    density = _optical_density(thumbnail[..., :3].astype(np.float64) / scale, np)
    cells = np.linalg.norm(density, axis=-1) >= min_density
    if margin:
        cells = ndimage.binary_dilation(cells, iterations=int(margin))
    cells = ndimage.binary_fill_holes(cells)
    return TissueMask(cells=np.ascontiguousarray(cells), cell=int(cell))


def slide_tissue(image):
    """The tissue mask of an RGB ``ivote.ImageFile`` from the smallest level of its pyramid (no read of
    level 0, ``ivote._slides.pyramid_of``), or ``'auto'`` (level 0 every :data:`TISSUE_CELL`-th pixel)
    for an image without one."""
    from .._slides import pyramid_of

    levels = pyramid_of(image)
    if len(levels) < 2:
        return "auto"
    smallest = levels[-1]
    return tissue_mask(smallest, cell=max(1, round(image.shape[0] / smallest.shape[0])))


class HematoxylinBlocks:
    """A (Y, X) float64 array-like view of an RGB(A) slide as its hematoxylin density.

    ``view[region]`` reads that region of the slide (NumPy, Dask or Zarr; only the tiles
    it touches) and returns :func:`ivote.detect.hematoxylin_density` of it with the
    slide-wide stain vectors and white level, glass set to 0 when a tissue mask is given.
    Block by block it equals :meth:`whole`, the in-memory signal.

    Parameters
    ----------
    rgb : (Y, X, 3|4) array-like
    stains : None, 'auto' or (2, 3) array
        As :func:`ivote.detect.hematoxylin_density`; ``'auto'`` is fitted once on the whole
        slide (:func:`slide_stain_vectors`).
    tissue : None, 'auto' or TissueMask
        ``'auto'``: :func:`tissue_mask` of level 0 read every :data:`TISSUE_CELL`-th pixel.
    """

    def __init__(self, rgb, *, stains=None, tissue=None):
        shape = tuple(int(n) for n in getattr(rgb, "shape", ()))
        if len(shape) != 3 or shape[-1] not in (3, 4):
            raise ValueError(f"an H&E slide must be RGB(A) (Y, X, 3|4); got shape {shape}")
        if np.dtype(rgb.dtype).kind not in "biuf":
            raise TypeError(f"an H&E slide must hold real numbers; got dtype {rgb.dtype}")
        from .._slides import tile_reader

        self.rgb = rgb
        self._tiles = tile_reader(rgb)  # a slide's level: read tile by tile, not by Dask chunks
        self.shape = shape[:2]
        self.dtype = np.dtype(np.float64)
        self.ndim = 2
        self.white = white_level(rgb)
        if isinstance(stains, str):
            if stains != "auto":
                raise ValueError(f"stains must be None, 'auto' or a (2, 3) array; got {stains!r}")
            stains = slide_stain_vectors(rgb)
        self.stains = None if stains is None else np.asarray(stains, dtype=np.float64)
        if isinstance(tissue, str):
            if tissue != "auto":
                raise ValueError(f"tissue must be None, 'auto' or a TissueMask; got {tissue!r}")
            tissue = tissue_mask(rgb[::TISSUE_CELL, ::TISSUE_CELL], cell=TISSUE_CELL)
        if tissue is not None and not isinstance(tissue, TissueMask):
            raise TypeError(f"tissue must be None, 'auto' or a TissueMask (ivote.detect.tissue_mask); got {tissue!r}")
        self.tissue = tissue

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return self.shape[0]

    def _region(self, key) -> tuple:
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > 2 or any(not isinstance(k, slice) or k.step not in (None, 1) for k in key):
            raise IndexError(f"HematoxylinBlocks takes a region (one or two slices without a step); got {key!r}")
        key = key + (slice(None),) * (2 - len(key))
        return tuple(slice(*k.indices(n)[:2]) for k, n in zip(key, self.shape))

    def is_glass(self, region) -> bool:
        """Whether a region holds no tissue (always False without a mask)."""
        return self.tissue is not None and not self.tissue.any(self._region(region))

    def __getitem__(self, key) -> np.ndarray:
        region = self._region(key)
        shape = tuple(max(0, s.stop - s.start) for s in region)
        if self.is_glass(region) or 0 in shape:
            return np.zeros(shape, dtype=np.float64)
        source = self.rgb if self._tiles is None else self._tiles
        block = _compute(source[region + (slice(0, 3),)])
        return self._density(block, region)

    def _density(self, block, region) -> np.ndarray:
        if block.dtype != np.uint8:  # the slide's white, not the block's maximum
            block = block.astype(np.float64) / self.white
        density = hematoxylin_density(block, stains=self.stains)
        if self.tissue is not None:
            density[~self.tissue.region(region)] = 0.0
        return density

    def whole(self) -> np.ndarray:
        """The whole slide's signal in memory (for slides that fit: the reference of the blocks)."""
        return self[:, :]


def hematoxylin_blocks(rgb, *, stains=None, tissue=None) -> HematoxylinBlocks:
    """:class:`HematoxylinBlocks` of an RGB(A) slide (``stains``, ``tissue`` as there)."""
    return HematoxylinBlocks(rgb, stains=stains, tissue=tissue)
