"""Synthetic H&E slides: tiles of :func:`ivote.data.synthetic_nuclei` coloured like
hematoxylin and eosin, on glass, written as a tiled pyramidal TIFF tile by tile."""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np

from ._synthetic import synthetic_nuclei

__all__ = ["he_colour", "synthetic_he_tile", "write_synthetic_slide"]

# Ruifrok & Johnston's optical-density vectors of hematoxylin and eosin (skimage.color.rgb_from_hed)
_HEMATOXYLIN = np.array([0.65, 0.70, 0.29]) / np.linalg.norm([0.65, 0.70, 0.29])
_EOSIN = np.array([0.07, 0.99, 0.11]) / np.linalg.norm([0.07, 0.99, 0.11])


def he_colour(nuclei, *, eosin=0.35, rng=None, glass=None, noise=2.0) -> np.ndarray:
    """uint8 RGB of a grey nuclei image (bright nuclei, 0..1) stained like H&E (Beer-Lambert).

    Hematoxylin is ``1.6 * nuclei``, eosin ``eosin`` plus a little texture; pixels where
    ``glass`` is True hold no stain (white, with the camera's noise, of standard deviation
    ``noise`` grey levels).
    """
    rng = np.random.default_rng(0) if rng is None else rng
    amount_h = 1.6 * np.clip(nuclei, 0.0, None)
    amount_e = eosin * (1.0 + 0.2 * rng.standard_normal(nuclei.shape))
    if glass is not None:
        amount_h = np.where(glass, 0.0, amount_h)
        amount_e = np.where(glass, 0.0, amount_e)
    density = amount_h[..., None] * _HEMATOXYLIN + np.clip(amount_e, 0.0, None)[..., None] * _EOSIN
    rgb = 245.0 * np.exp(-density) + rng.normal(0.0, noise, density.shape)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def synthetic_he_tile(size: int, *, radius: float = 6.0, seed: int = 0):
    """``(rgb, centres)``: a ``size`` x ``size`` H&E tile of synthetic nuclei and their true centres."""
    image, _, centres, *_ = synthetic_nuclei((size, size), radius=radius, noise=0.05, seed=seed)
    return he_colour(image, rng=np.random.default_rng(seed)), centres


def write_synthetic_slide(path, size: int | tuple, *, tile: int = 256, pattern: int = 1024, radius: float = 6.0,
                          glass_every: int = 3, levels: int = 3, mpp: float = 0.5, compression="jpeg",
                          tissue_fraction: float | None = None) -> Path:
    """Write a pyramidal tiled RGB TIFF of ``size`` (one side, or (Y, X)) pixels, tile by tile.

    The slide repeats a few ``pattern`` x ``pattern`` H&E tiles of synthetic nuclei; every
    ``glass_every``-th pattern tile (in a checkerboard order) is glass (0: none). With
    ``tissue_fraction`` the tissue is a centred ellipse of pattern tiles covering about that
    share of the slide (at most pi / 4), glass around it, as on a scanned slide. Level k is
    level 0 downsampled by 2**k (every other pixel). Memory holds the pattern tiles, never
    the slide. The pixel size ``mpp`` goes in the resolution tags (centimetres).

    With ``compression="zlib"`` each distinct tile is compressed once and its bytes written
    wherever it repeats, so that writing a 100,000² slide costs its disk writes only.
    """
    import tifffile

    height, width = (size, size) if np.isscalar(size) else (int(size[0]), int(size[1]))
    if pattern % tile:
        raise ValueError(f"pattern ({pattern}) must be a multiple of tile ({tile})")
    if tissue_fraction is not None and not 0 < tissue_fraction <= math.pi / 4:
        raise ValueError(f"tissue_fraction must satisfy 0 < tissue_fraction <= pi/4; got {tissue_fraction!r}")
    patterns = [synthetic_he_tile(pattern, radius=radius, seed=seed)[0] for seed in range(4)]
    # glass: a scanner's flat-fielded background, little noise (it compresses as a slide's glass does)
    white = he_colour(np.zeros((pattern, pattern)), glass=np.ones((pattern, pattern), bool),
                      rng=np.random.default_rng(99), noise=0.5)
    # the ellipse's semi-axes, in pixels: pi * a * b = fraction * height * width
    scale = math.sqrt(4 * tissue_fraction / math.pi) if tissue_fraction else None

    def pattern_at(i, j):
        if scale is not None:
            dy = ((i + 0.5) * pattern - height / 2) / (scale * height / 2)
            dx = ((j + 0.5) * pattern - width / 2) / (scale * width / 2)
            if dy * dy + dx * dx > 1:
                return white
        if glass_every and (i + 2 * j) % glass_every == glass_every - 1:
            return white
        return patterns[(i * 7 + j * 3) % len(patterns)]

    packed = {}  # zlib: what a tile is made of (sources, level, offsets) -> its compressed bytes

    def encoded(key, pixels):
        if compression != "zlib":
            return pixels
        if key not in packed:
            packed[key] = zlib.compress(np.ascontiguousarray(pixels).tobytes(), 6)
        return packed[key]

    def tiles(step):
        t = tile
        shrunk = {}  # the pattern tiles at this level, each read every step-th pixel
        rows, cols = math.ceil(math.ceil(height / step) / t), math.ceil(math.ceil(width / step) / t)
        for r in range(rows):
            for c in range(cols):
                ys, xs = np.arange(r * t, (r + 1) * t) * step, np.arange(c * t, (c + 1) * t) * step
                first, last = (ys[0] // pattern, xs[0] // pattern), (ys[-1] // pattern, xs[-1] // pattern)
                if first == last and ys[-1] < height and xs[-1] < width:  # inside one pattern tile: a slice
                    src = pattern_at(*first)
                    key = (id(src), step)
                    if key not in shrunk:
                        shrunk[key] = np.ascontiguousarray(src[::step, ::step])
                    y0, x0 = (ys[0] % pattern) // step, (xs[0] % pattern) // step
                    yield encoded(key + (y0, x0), shrunk[key][y0:y0 + t, x0:x0 + t])
                    continue
                inside_y, inside_x = ys < height, xs < width
                rows_p, cols_p = np.unique(ys[inside_y] // pattern), np.unique(xs[inside_x] // pattern)
                # a tile over several pattern tiles: the same sources at the same offsets give the same tile
                key = (step, int(ys[0] % pattern), int(xs[0] % pattern), int(inside_y.sum()), int(inside_x.sum()),
                       tuple(id(pattern_at(int(pi), int(pj))) for pi in rows_p for pj in cols_p))
                if compression == "zlib" and key in packed:
                    yield packed[key]
                    continue
                out = np.full((t, t, 3), 255, np.uint8)
                for pi in rows_p:
                    for pj in cols_p:
                        sy = inside_y & (ys // pattern == pi)
                        sx = inside_x & (xs // pattern == pj)
                        src = pattern_at(int(pi), int(pj))
                        out[np.ix_(sy, sx)] = src[np.ix_(ys[sy] % pattern, xs[sx] % pattern)]
                yield encoded(key, out)

    path = Path(path)
    resolution = (1e4 / mpp, 1e4 / mpp)
    with tifffile.TiffWriter(path, bigtiff=height * width * 3 > 2**31) as tif:
        options = dict(tile=(tile, tile), photometric="rgb", compression=compression, dtype=np.uint8)
        tif.write(tiles(1), shape=(height, width, 3), subifds=levels - 1, resolution=resolution,
                  resolutionunit="CENTIMETER", **options)
        for level in range(1, levels):
            step = 2**level
            tif.write(tiles(step), shape=(math.ceil(height / step), math.ceil(width / step), 3), subfiletype=1,
                      **options)
    return path
