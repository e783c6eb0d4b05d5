"""Whole slides in napari: SVS, NDPI and pyramidal (OME-)TIFF open as a multiscale layer (every
level of the pyramid, read tile by tile, scale in micrometres), and "Run in blocks (whole image)" reads
an RGB slide as its hematoxylin density block by block, glass skipped (``ivote._slides``,
``ivote.detect._colour_blocks``: no math here)."""

from __future__ import annotations

from .._slides import SLIDE_SUFFIXES

__all__ = ["get_slide_reader", "read_slide_layers", "slide_signal"]

PATTERNS = SLIDE_SUFFIXES


def get_slide_reader(path):
    """napari reader hook: a reader for one SVS or NDPI file, or None."""
    if isinstance(path, (list, tuple)):
        if len(path) != 1:
            return None
        path = path[0]
    return read_slide_layers if str(path).lower().endswith(PATTERNS) else None


def read_slide_layers(path) -> list[tuple]:
    """The slide as one multiscale Image layer (:func:`ivote.napari._image_io.read_image_layers`'s attributes)."""
    from ._image_io import read_image_layers

    return read_image_layers(path)


def slide_signal(layer):
    """What "Run in blocks (whole image)" detects on for an RGB layer: its full-resolution level as the
    hematoxylin density, glass (a tissue mask from the smallest level) read as 0 and skipped."""
    from ..detect._colour_blocks import HematoxylinBlocks, tissue_mask

    levels = list(layer.data) if layer.multiscale else [layer.data]
    full = levels[0]
    smallest = levels[-1]
    cell = max(1, round(full.shape[0] / smallest.shape[0]))
    if cell == 1:  # one level: level 0 read every TISSUE_CELL-th pixel
        return HematoxylinBlocks(full, tissue="auto")
    return HematoxylinBlocks(full, tissue=tissue_mask(smallest, cell=cell))

