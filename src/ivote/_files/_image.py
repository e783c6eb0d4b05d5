"""An opened image: its lazy array, named axes (letters of ``TCZYXS``) and pixel sizes, and the rules
that name the axes where the metadata does not."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ._metadata import BadPixelSize

__all__ = ["AxesError", "CANONICAL", "ImageFile", "PLAIN_SUFFIXES", "TIFF_SUFFIXES", "VENDOR_SUFFIXES", "rgb_to_unit_range"]


CANONICAL = "TCZYXS"


TIFF_SUFFIXES = (".tif", ".tiff", ".btf", ".tf8")


PLAIN_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


VENDOR_SUFFIXES = (".czi", ".nd2", ".lif")


_MIN_PLAIN_PLANES = 4  # a plain stack of more planes than this (and no metadata) is read as Z


class AxesError(ValueError):
    """The file does not say what its axes are (or which channel holds the nuclei)."""


@dataclass(frozen=True)
class ImageFile:
    """An image opened from a file: lazy data with named axes and pixel sizes.

    Axes are in canonical order (a subset of ``TCZYXS``), singleton T, C and Z
    axes dropped. ``spacing`` holds one size in micrometres per spatial axis
    (``Z, Y, X`` or ``Y, X``), None where the file gives none.
    """

    data: object
    """Dask array (lazy), one dimension per letter of ``axes``."""
    axes: str
    spacing: tuple
    path: str = ""
    scene: str | None = None
    scenes: tuple = ()
    channel_names: tuple | None = None
    axes_from: str = ""
    """Where the axes came from: 'OME metadata', 'ImageJ hyperstack', 'axes=' ..."""
    time_interval: float | None = None
    origin: tuple | None = None
    """World position of the first pixel in micrometres, one per spatial axis (a napari layer's
    translate): from an OME-Zarr ``translation``, or the Plane positions of an OME-TIFF that
    :func:`write_image` wrote (a microscope's Plane positions are stage positions and are not read:
    :data:`ORIGIN_NAMESPACE`); None when the file gives none."""
    spacing_problem: str = ""
    """Why a pixel size the file gives cannot be used (0, negative, NaN, an unknown unit); that
    axis's ``spacing`` is None and :meth:`known_spacing` raises this, so a command refuses the
    file unless ``--spacing`` is given."""

    @property
    def shape(self) -> tuple:
        return tuple(int(n) for n in self.data.shape)

    @property
    def spatial_axes(self) -> str:
        return "".join(a for a in self.axes if a in "ZYX")

    @property
    def is_rgb(self) -> bool:
        return "S" in self.axes

    @property
    def n_frames(self) -> int:
        return self.shape[self.axes.index("T")] if "T" in self.axes else 1

    def known_spacing(self) -> tuple | None:
        """The spacing when the file gives every spatial axis, None when it gives none.

        Raises
        ------
        ValueError
            When the file gives some axes' pixel sizes but not all (typically z).
        """
        if self.spacing_problem:
            raise BadPixelSize(self.spacing_problem)
        if all(s is None for s in self.spacing):
            return None
        missing = [a for a, s in zip(self.spatial_axes, self.spacing) if s is None]
        if missing:
            given = ", ".join(f"{a} {s:g} um" for a, s in zip(self.spatial_axes, self.spacing) if s is not None)
            raise ValueError(
                f"{Path(self.path).name} gives the pixel size of {given} but not of {', '.join(missing)}; "
                f"give all of them with --spacing {' '.join(self.spatial_axes)} (spacing= in Python)"
            )
        return tuple(float(s) for s in self.spacing)

    def select_channel(self, channel: int | str | None = None) -> "ImageFile":
        """The nuclear stain: axes ``[T][Z]YX`` or ``[T]YXS`` (RGB), channel chosen.

        ``channel`` is an index or a channel name; it is needed when the file has
        more than one channel. For RGB(A) it picks one sample instead of the
        colour (H&E) reading.
        """
        data, axes = self.data, self.axes
        names = self.channel_names
        if isinstance(channel, str) and channel.strip().isdigit():
            channel = int(channel)
        if "C" in axes:
            n = data.shape[axes.index("C")]
            if channel is None:
                listed = f" ({', '.join(map(str, names))})" if names and len(names) == n else ""
                raise AxesError(
                    f"{self._name()} has {n} channels{listed}: choose the nuclear stain with --channel N "
                    f"(0..{n - 1}) on the command line, channel=N in Python"
                )
            index = _channel_index(channel, n, names, self._name())
            data = _take(data, axes.index("C"), index)
            axes = axes.replace("C", "")
        elif "S" in axes and channel is not None:
            n = data.shape[axes.index("S")]
            index = _channel_index(channel, n, None, self._name())
            data = _take(data, axes.index("S"), index)
            axes = axes.replace("S", "")
        elif channel is not None and not (isinstance(channel, (int, np.integer)) and int(channel) == 0):
            raise AxesError(
                f"{self._name()} has one channel (axes {axes}, shape {self.shape}); --channel/channel= "
                f"can only be 0 here (if an axis holds channels, name it C with --axes)"
            )
        if "S" in axes and data.shape[axes.index("S")] not in (3, 4):
            raise AxesError(f"{self._name()}: {data.shape[axes.index('S')]} samples per pixel is not RGB(A); "
                            f"pick one with --channel N")
        if "S" in axes and "Z" in axes:
            raise AxesError(f"{self._name()}: RGB z stacks (axes {axes}) are not supported; pick one colour with --channel N")
        return replace(self, data=data, axes=axes, channel_names=None)

    def _name(self) -> str:
        return Path(self.path).name if self.path else "the image"


def _take(data, axis: int, index: int):
    return data[(slice(None),) * axis + (index,)]


def _channel_index(channel, n: int, names, filename: str) -> int:
    if isinstance(channel, str) and not channel.strip().lstrip("-").isdigit():
        lowered = [str(c).lower() for c in (names or ())]
        if channel.lower() in lowered:
            return lowered.index(channel.lower())
        listed = ", ".join(map(str, names)) if names else "none"
        raise AxesError(f"{filename} has no channel named {channel!r} (channels: {listed}); give --channel N (0..{n - 1})")
    try:
        index = int(channel)
    except (TypeError, ValueError):
        raise AxesError(f"channel must be an integer 0..{n - 1} or a channel name; got {channel!r}") from None
    if isinstance(channel, bool) or not 0 <= index < n:
        raise AxesError(f"channel must be an integer 0..{n - 1} for {filename} ({n} channels); got {channel!r}")
    return index


def rgb_to_unit_range(rgb):
    """RGB(A) scaled by its real range for the colour transform.

    uint8 is returned as it is (the transform divides it by 255); any other
    dtype becomes float64 divided by the smallest of 1, 255 and 65535 that is
    at least its maximum (float 0..1, float or integers 0..255 or 0..65535),
    else by its maximum.

    >>> rgb_to_unit_range(np.array([[[0., 127.5, 255.]]]))
    array([[[0. , 0.5, 1. ]]])
    """
    rgb = np.asarray(rgb)
    if rgb.dtype == np.uint8:
        return rgb
    values = rgb.astype(np.float64)
    if values.size and not np.isfinite(values).all():
        raise ValueError("the RGB image contains NaN or infinite values; replace them first")
    low = float(values.min()) if values.size else 0.0
    if low < 0:
        raise ValueError(f"RGB values must not be negative; the image's minimum is {low:g}")
    from ..detect._colour import rgb_full_scale

    return values / rgb_full_scale(values)


@dataclass
class _Raw:
    """What a format reader found, before the axes are settled."""

    data: object  # dask array in stored order
    axes: str  # one letter per dim; '?' where the metadata names none
    axes_from: str  # '' when nothing names them
    spacing: dict  # {'Z'|'Y'|'X': micrometres}
    scenes: tuple
    scene: str | None
    channel_names: tuple | None = None
    time_interval: float | None = None
    three_spatial_from_metadata: bool = False  # our own JSON gave 3 pixel sizes
    path: str = ""
    origin: dict = field(default_factory=dict)  # {'Z'|'Y'|'X': micrometres}, the first pixel's position


def _check_axes_text(axes) -> str:
    text = str(axes).strip().upper()
    bad = sorted(set(text) - set(CANONICAL))
    if not text or bad or len(set(text)) != len(text) or not {"Y", "X"} <= set(text):
        raise AxesError(
            f"axes must be distinct letters of TCZYXS including Y and X (e.g. CYX, ZYX, YXS, TZYX); got {axes!r}"
        )
    return text


def _scene_index(scene, scenes, filename) -> int:
    if scene is None:
        return 0
    if isinstance(scene, str) and not scene.strip().isdigit():
        if scene in scenes:
            return scenes.index(scene)
        raise ValueError(f"{filename} has no scene {scene!r}; its scenes are {', '.join(scenes)} (or an index 0..{len(scenes) - 1})")
    index = int(scene)
    if not 0 <= index < len(scenes):
        raise ValueError(f"scene must be 0..{len(scenes) - 1} for {filename} ({len(scenes)} scenes); got {scene!r}")
    return index


def _quiet_bioio():
    """bioio logs every reader it tries and fails with; we pick the reader ourselves."""
    import logging

    logging.getLogger("bioio").setLevel(logging.ERROR)
    logging.getLogger("bioio_base").setLevel(logging.ERROR)


def _name_axes(raw: _Raw, axes: str | None) -> ImageFile:
    data, stored = raw.data, raw.axes
    filename = Path(raw.path).name
    shape = tuple(int(n) for n in data.shape)
    if axes is not None:
        squeezed = [i for i, n in enumerate(shape) if not (n == 1 and stored[i] in "TCZ?")]
        if len(axes) == len(shape):
            keep = list(range(len(shape)))
        elif len(axes) == len(squeezed):
            keep = squeezed
            data = data.reshape(tuple(shape[i] for i in keep))
        else:
            raise AxesError(f"axes={axes!r} names {len(axes)} axes but {filename} has shape {shape}; "
                            f"give one letter per axis")
        from_file = "".join(stored[i] for i in keep)
        if raw.axes_from and "?" not in from_file and from_file != axes:
            warnings.warn(f"{filename}: its {raw.axes_from} names the axes {from_file}; using {axes} as given",
                          UserWarning, stacklevel=3)
        named, source = axes, "axes="
    elif "?" in stored or not raw.axes_from:
        named = _axes_from_shape(stored, shape, filename, raw.three_spatial_from_metadata)
        source = raw.axes_from or ("napari-ivote's TIFF spacing" if raw.three_spatial_from_metadata else "shape")
    else:
        named, source = stored, raw.axes_from
    # canonical order, singleton T/C/Z dropped
    order = sorted(range(len(named)), key=lambda i: CANONICAL.index(named[i]))
    try:
        data = data.transpose(order) if order != sorted(order) else data  # identity: keep the reader's array
    except ValueError as exc:  # NumPy's "axes don't match array", without the file's name
        raise AxesError(f"{filename}: the axes {named} ({source}) do not fit its array of shape {shape} ({exc}); "
                        "name them with --axes (axes= in Python), one letter per axis") from None
    named = "".join(named[i] for i in order)
    drop = [i for i, a in enumerate(named) if a in "TCZ" and data.shape[i] == 1]
    if drop:
        data = data[tuple(0 if i in drop else slice(None) for i in range(len(named)))]
        named = "".join(a for i, a in enumerate(named) if i not in drop)
    if "S" in named and data.shape[named.index("S")] == 1:
        data, named = data[..., 0], named[:-1]
    spatial = "".join(a for a in named if a in "ZYX")
    spacing = tuple(raw.spacing.get(a) for a in spatial)
    problem = raw.spacing.get("problem", "")
    origin = tuple(raw.origin.get(a, 0.0) for a in spatial) if raw.origin else None
    names = raw.channel_names if "C" in named and raw.channel_names and len(raw.channel_names) == data.shape[named.index("C")] else None
    return ImageFile(data=data, axes=named, spacing=spacing, path=raw.path, scene=raw.scene, scenes=raw.scenes,
                     channel_names=names, axes_from=source, time_interval=raw.time_interval, origin=origin,
                     spacing_problem=problem)


def _axes_from_shape(stored: str, shape: tuple, filename: str, three_spatial: bool) -> str:
    """Axes where the metadata names none: only shapes with one reading pass."""
    fix = ("name them with --axes (e.g. --axes CYX --channel 0, --axes ZYX, --axes YXS, --axes TYX) on the "
           "command line, axes='CYX', channel=0 in Python")
    if len(shape) == 2:
        return "YX"
    if stored.endswith("YXS") and len(shape) == 3:
        return "YXS"
    if len(shape) == 3 and stored[1:] == "YX":
        n, height, width = shape
        if three_spatial:
            return "ZYX"
        if n > _MIN_PLAIN_PLANES and height > _MIN_PLAIN_PLANES and width > _MIN_PLAIN_PLANES:
            return "ZYX"
        if width <= _MIN_PLAIN_PLANES:
            reading = f"its last axis ({width}) could be channels or colours (YXC, YXS) or it is a z stack (ZYX)"
        else:
            reading = f"its first axis ({n}) could be channels (CYX) or z planes (ZYX)"
        raise AxesError(f"{filename} has shape {shape} and its metadata does not name the axes: {reading}; {fix}")
    raise AxesError(f"{filename} has shape {shape} and its metadata does not name the axes; {fix}")
