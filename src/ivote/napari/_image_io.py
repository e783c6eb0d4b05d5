"""Reader contribution for microscopy images (``ivote._files``): OME-TIFF, OME-Zarr and the
vendor formats open with their pixel sizes as the layers' scale, one layer per channel; labels
written by ``ivote segment`` open as a Labels layer."""

from __future__ import annotations

from pathlib import Path

from .._files import VENDOR_SUFFIXES, open_image

__all__ = ["get_image_reader", "read_image_layers"]

PATTERNS = (".ome.tif", ".ome.tiff", ".ome.zarr", *VENDOR_SUFFIXES)
LABELS_NAME = "labels"  # the OME image name ivote writes on labels


def get_image_reader(path):
    """napari reader hook: a reader for one OME-TIFF/OME-Zarr/CZI/ND2/LIF path, or None."""
    if isinstance(path, (list, tuple)):
        if len(path) != 1:
            return None
        path = path[0]
    name = str(path).rstrip("/\\").lower()
    return read_image_layers if name.endswith(PATTERNS) else None


def read_image_layers(path) -> list[tuple]:
    """The image as napari layer data: lazy (Dask) data, scale in micrometres (1 where unknown),
    translate the file's origin (micrometres) when it gives one and every pixel size."""
    path = Path(path[0] if isinstance(path, (list, tuple)) else path)
    image = open_image(path)
    spatial = [1.0 if s is None else float(s) for s in image.spacing]
    scale = ([1.0] if "T" in image.axes else []) + spatial
    attributes: dict = {"name": path.name.split(".")[0], "scale": tuple(scale),
                        "metadata": {"source": str(path), "axes": image.axes, "spacing_um": image.spacing}}
    if "T" not in image.axes and all(s is not None for s in image.spacing):
        attributes["units"] = ("micrometer",) * len(spatial)
    if image.origin is not None and all(s is not None for s in image.spacing):  # micrometres, as the scale
        attributes["translate"] = (0.0,) * ("T" in image.axes) + tuple(image.origin)
    if image.scene == LABELS_NAME and "C" not in image.axes and not image.is_rgb:
        return [(image.data, attributes, "labels")]
    if "C" in image.axes:
        attributes["channel_axis"] = image.axes.index("C")
        if image.channel_names:
            attributes["name"] = [str(c) for c in image.channel_names]
    if image.is_rgb:
        attributes["rgb"] = True
    from .._slides import pyramid_of  # a tiled pyramid (whole slide): every level

    levels = pyramid_of(image) if "C" not in image.axes else [image.data]
    data = levels if len(levels) > 1 else image.data
    return [(data, {**attributes, "multiscale": len(levels) > 1}, "image")]
