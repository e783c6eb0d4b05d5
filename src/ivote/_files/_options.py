"""The command line's input options (``--axes``, ``--channel``, ``--scene``) and the spacing a
command uses."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ._image import ImageFile
from ._read import list_scenes

__all__ = ["add_input_options", "command_spacing", "input_scenes", "resolve_spacing", "scene_path"]


def add_input_options(parser, *, channel: bool = True) -> None:
    """``--axes``, ``--channel`` and ``--scene`` for a command that reads an image."""
    parser.add_argument("--axes", default=None, metavar="AXES",
                        help="the stored axes in order, letters of TCZYXS (e.g. CYX, ZYX, YXS, TZYX), when the "
                             "file's metadata does not name them (default: from the file)")
    if channel:
        parser.add_argument("--channel", default=None, metavar="N",
                            help="the nuclear-stain channel (index or name) of a multi-channel image; for RGB, "
                                 "one colour instead of the hematoxylin density")
    parser.add_argument("--scene", default=None, metavar="S",
                        help="scene/series/position index or name of a multi-scene file, or 'all' (one output "
                             "each, named OUT_<scene>) (default: the first)")


def input_scenes(args) -> list:
    """The scenes a command runs on: ``[(scene or None, output path)]``."""
    if str(getattr(args, "scene", None) or "").lower() != "all":
        return [(args.scene, Path(args.out))]
    return [(i, scene_path(args.out, s)) for i, s in enumerate(list_scenes(args.input))]


def scene_path(path, scene) -> Path:
    """``OUT.csv`` -> ``OUT_<scene>.csv`` (``.ome.tif``, ``.ome.zarr`` kept whole)."""
    path = Path(path)
    name = path.name
    for double in (".ome.tif", ".ome.tiff", ".ome.zarr"):
        if name.lower().endswith(double):
            stem, suffix = name[: -len(double)], name[-len(double):]
            break
    else:
        stem, suffix = path.stem, path.suffix
    return path.with_name(f"{stem}_{_safe(scene)}{suffix}")


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


def resolve_spacing(file_spacing, given, ndim: int, *, command: str = "ivote", source: str = "the file"):
    """The spacing a command uses: ``--spacing`` when given (a warning on stderr
    when it contradicts the file's), else the file's, else None (pixels)."""
    if given:
        given = tuple(float(s) for s in given)
        if len(given) != ndim:
            axes = "Z Y X" if ndim == 3 else "Y X"
            raise ValueError(f"--spacing needs {ndim} values ({axes}) for this {ndim}D image; got {len(given)}")
        if file_spacing is not None and len(file_spacing) == ndim and not np.allclose(given, file_spacing, rtol=1e-6):
            print(f"{command}: warning: --spacing {' '.join(f'{s:g}' for s in given)} differs from {source}'s "
                  f"{' '.join(f'{s:g}' for s in file_spacing)} um; using --spacing", file=sys.stderr)
        return given
    return file_spacing


def command_spacing(image: ImageFile, given, *, command: str, fallback=None):
    """The spacing a command uses for ``image``: ``--spacing`` (``given``), else the
    file's, else ``fallback`` (e.g. the points table's scale), else None (pixels)."""
    ndim = len(image.spatial_axes)
    try:
        file_spacing = image.known_spacing()
    except ValueError:
        if not given:
            raise
        file_spacing = None
    if file_spacing is None and not given and fallback is not None and len(fallback) == ndim:
        file_spacing = tuple(fallback)
    return resolve_spacing(file_spacing, given, ndim, command=command)
