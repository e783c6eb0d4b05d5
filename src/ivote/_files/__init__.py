"""Microscopy files in and out: named axes, channels, time, scenes and pixel sizes.

Every entry point (``ivote.open_image``, ``ivote.io.read_image``, the command
line, the napari reader) reads images here. The file's own metadata names the
axes: OME (OME-TIFF, OME-Zarr), ImageJ hyperstacks, the TIFF photometric tag
and PNG/JPEG colour types, the vendor formats through their bioio readers.
Where the metadata names none and the shape is ambiguous, an :class:`AxesError`
says how to name them (``axes=``/``--axes``); nothing is guessed from the shape
except one documented rule: a plain stack of more than 4 planes of more than
4 x 4 pixels is a z stack.

Axes are letters of ``TCZYXS``: time, channel, z, y, x and samples (RGB/RGBA).
Pixel sizes are converted to micrometres whatever unit the file uses.
Data stay lazy (a Dask array) until a caller computes them, so a chunked
engine can work on an :class:`ImageFile` directly.


The package holds one module per concern: ``_image`` (the opened image and the axis rules),
``_metadata`` (pixel sizes and other metadata), ``_zarr`` (Zarr stores), ``_read`` (the format
readers), ``_write`` (OME-TIFF and OME-Zarr output) and ``_options`` (the command line's input
options); every name is importable from ``ivote._files`` as before.
"""

from __future__ import annotations

from ._metadata import (  # noqa: F401 (re-exported: importable from ivote._files as before)
    ORIGIN_NAMESPACE,
    BadPixelSize,
    file_pixel_size,
)
from ._image import (  # noqa: F401 (re-exported: importable from ivote._files as before)
    CANONICAL,
    TIFF_SUFFIXES,
    PLAIN_SUFFIXES,
    VENDOR_SUFFIXES,
    AxesError,
    ImageFile,
    rgb_to_unit_range,
)
from ._zarr import (  # noqa: F401 (re-exported: importable from ivote._files as before)
    ZarrBlocks,
    zarr_dask,
)
from ._read import (  # noqa: F401 (re-exported: importable from ivote._files as before)
    read_for_detection,
    list_scenes,
    open_image,
    scale_for_layer,
    adopt_file_scale,
    not_regular_file,
)
from ._write import (  # noqa: F401 (re-exported: importable from ivote._files as before)
    write_image,
)
from ._options import (  # noqa: F401 (re-exported: importable from ivote._files as before)
    add_input_options,
    input_scenes,
    scene_path,
    resolve_spacing,
    command_spacing,
)
from .._units import to_micrometres  # noqa: F401

__all__ = [
    "AxesError",
    "ImageFile",
    "list_scenes",
    "open_image",
    "read_for_detection",
    "rgb_to_unit_range",
    "adopt_file_scale",
    "scale_for_layer",
    "to_micrometres",
    "write_image",
]
