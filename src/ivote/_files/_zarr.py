"""Zarr stores as images: OME-Zarr (v0.4, v0.5) and plain Zarr arrays (v2, v3), read block by
block with damaged chunks named."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputFileError
from ._image import CANONICAL, _Raw, _quiet_bioio, _scene_index
from ._metadata import _length_um, _read_sizes, _transform_numbers, file_pixel_size

__all__ = ["ZarrBlocks", "zarr_dask"]


# Zarr 3 needs Python 3.11; Python 3.10 gets Zarr 2, which reads and writes v2 stores only.
# The few calls whose API differs between the two go through these helpers.
def _zarr_major() -> int:
    import zarr

    return int(zarr.__version__.split(".")[0])


def _zarr_format(array) -> int:
    """2 or 3: the format of an open Zarr array (Zarr 2 opens only format 2)."""
    metadata = getattr(array, "metadata", None)
    return int(getattr(metadata, "zarr_format", 2 if _zarr_major() < 3 else 3))


def _v2_group(path):
    """A new, empty format-2 Zarr group at ``path`` (OME-Zarr 0.4)."""
    import zarr

    if _zarr_major() < 3:
        return zarr.open_group(str(path), mode="w")
    return zarr.open_group(str(path), mode="w", zarr_format=2)


def _v2_array(group, name: str, *, shape, dtype, chunks):
    """A new array ``name`` of a format-2 group, its chunks keyed ``0/1/2`` (OME-Zarr 0.4)."""
    if _zarr_major() < 3:
        return group.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks, dimension_separator="/")
    return group.create_array(name, shape=shape, dtype=dtype, chunks=chunks,
                              chunk_key_encoding={"name": "v2", "separator": "/"})


def _open_zarr(path: Path, scene) -> _Raw:
    import zarr

    _quiet_bioio()
    node = _open_zarr_node(path)
    if isinstance(node, zarr.Array):
        return _plain_zarr(node, path, scene)
    group = node
    attrs = dict(group.attrs)
    multiscales = attrs.get("ome", {}).get("multiscales") or attrs.get("multiscales")
    if not multiscales:
        arrays = sorted(name for name, _ in group.arrays())
        listed = (f"; to read one of its arrays as a plain image give its path, e.g. {path / arrays[0]} "
                  f"(arrays: {', '.join(arrays[:8])}{', ...' if len(arrays) > 8 else ''})" if arrays else "")
        raise InputFileError(f"{path.name} is a Zarr group without OME-Zarr 'multiscales' metadata{listed}; "
                             "or write it as OME-Zarr (v0.4 or v0.5), or give a TIFF")
    scenes = tuple(m.get("name") or f"Image:{i}" for i, m in enumerate(multiscales))
    index = _scene_index(scene, scenes, path.name)
    ms = multiscales[index]
    axes_meta = ms.get("axes") or [{"name": a} for a in "tczyx"]
    letters = "".join(str(a["name"] if isinstance(a, dict) else a)[:1].upper() for a in axes_meta)
    letters = "".join(a if a in CANONICAL else "?" for a in letters)
    if not ms.get("datasets"):
        raise InputFileError(f"{path.name}: its OME-Zarr multiscales metadata lists no datasets")
    dataset = ms["datasets"][0]
    scale, shift, translated = [1.0] * len(letters), [0.0] * len(letters), False
    # the dataset's transforms first, then the multiscale's (OME-NGFF): world = scale * index + shift
    for transform in dataset.get("coordinateTransformations", []) + ms.get("coordinateTransformations", []):
        if transform.get("type") == "scale":
            factors = _transform_numbers(transform.get("scale"), len(letters), "scale", path.name)
            scale = [a * b for a, b in zip(scale, factors)]
            shift = [a * b for a, b in zip(shift, factors)]
        elif transform.get("type") == "translation":
            translated = True
            if "translation" in transform:
                moves = _transform_numbers(transform["translation"], len(letters), "translation", path.name)
                shift = [a + b for a, b in zip(shift, moves)]
    spacing, origin, problems = {}, {}, []
    for letter, size, position, ax in zip(letters, scale, shift, axes_meta):
        if letter in "ZYX":
            unit = ax.get("unit") if isinstance(ax, dict) else None
            um = _read_sizes(lambda: file_pixel_size(size, unit or "pixel", path.name, letter, "OME-Zarr scale"),
                             problems)
            if um is not None:
                spacing[letter] = um
            position_um = _length_um(position, unit) if unit else None
            if translated and position_um is not None:
                origin[letter] = position_um
    arrays = dict(group.arrays())
    name = str(dataset.get("path", ""))
    if name not in arrays:
        try:  # a nested path ("s0/0")
            arrays[name] = group[name]
        except (KeyError, ValueError, TypeError):
            held = ", ".join(sorted(arrays)[:8]) or "none"
            raise InputFileError(f"{path.name}: its OME-Zarr metadata names the dataset {name!r}, which the store "
                                 f"does not hold (arrays: {held}); the store is incomplete") from None
    array = arrays[name]
    if not isinstance(array, zarr.Array) or len(array.shape) != len(letters):
        raise InputFileError(f"{path.name}: dataset {name!r} has {len(getattr(array, 'shape', ()))} axes but the "
                             f"OME-Zarr metadata names {len(letters)} ({letters}); the store is inconsistent")
    data = zarr_dask(array, path / name)
    spacing.update({"problem": problems[0]} if problems else {})
    names = None
    omero = attrs.get("ome", attrs).get("omero")
    if omero and omero.get("channels"):
        names = tuple(str(c.get("label", i)) for i, c in enumerate(omero["channels"]))
    return _Raw(data, letters, "OME-Zarr metadata", spacing, scenes, scenes[index], names, origin=origin)


def _open_zarr_node(path: Path):
    """The Zarr group or array at ``path`` (v2 or v3), or an InputFileError saying what is there."""
    import zarr

    if not path.is_dir():
        raise InputFileError(f"{path} is not a Zarr store (a folder holding zarr.json, .zgroup or .zarray)")
    if (path / "zarr.json").is_file() and _zarr_major() < 3:
        raise InputFileError(f"{path} is a Zarr v3 store (OME-Zarr 0.5), which needs zarr >= 3 and so Python >= "
                             "3.11; this Python has zarr 2, which reads v2 stores (.zgroup/.zarray) only")
    try:
        return zarr.open(str(path), mode="r")
    except Exception as exc:  # noqa: BLE001 - zarr's errors do not name the store
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise InputFileError(f"cannot read {path} as a Zarr store ({type(exc).__name__}: {detail}); it needs "
                             "zarr.json (v3) or .zgroup/.zarray (v2) metadata") from None


class ZarrBlocks:
    """A Zarr array read block by block for Dask: a chunk that cannot be read (missing
    compressor, truncated or corrupt data) raises an InputFileError naming the store and the
    chunk instead of the codec's message."""

    def __init__(self, array, path):
        self.array, self.path = array, str(path)
        self.shape, self.dtype, self.ndim = tuple(array.shape), array.dtype, len(array.shape)

    def __getitem__(self, key):
        try:
            return self.array[key]
        except Exception as exc:  # noqa: BLE001 - any codec or store error of this block
            raise InputFileError(f"{self.path}: {self._chunks(key)} of the Zarr array cannot be read "
                                 f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); the store is "
                                 "damaged or incomplete: write it again") from None

    def _chunks(self, key) -> str:
        key = key if isinstance(key, tuple) else (key,)
        first, last = [], []
        for k, size, n in zip(key, self.array.chunks, self.shape):
            start, stop = (k.start or 0, (k.stop if k.stop is not None else n)) if isinstance(k, slice) else (k, k + 1)
            first.append(start // size)
            last.append(max(start, stop - 1) // size)
        separator = "." if _zarr_format(self.array) == 2 else "/"
        names = [separator.join(map(str, first)) if first == last else None]
        if names[0] is not None:
            return f"chunk {names[0]}"
        return f"a chunk between {separator.join(map(str, first))} and {separator.join(map(str, last))}"


def zarr_dask(array, path):
    """A lazy Dask array of a Zarr array, one block per chunk (:class:`ZarrBlocks`)."""
    import dask.array as da

    return da.from_array(ZarrBlocks(array, path), chunks=tuple(array.chunks), asarray=True, lock=False,
                         name=f"zarr-{path}-{abs(hash((str(path), tuple(array.shape), str(array.dtype))))}",
                         inline_array=True)


def _plain_zarr(array, path: Path, scene) -> _Raw:
    """A plain Zarr array (``zarr.open(..., shape=)``, ``dask.array.to_zarr``): axes from its
    dimension names (v3) or an ``axes``/``_ARRAY_DIMENSIONS`` attribute, else from ``--axes`` (the
    TIFF rules when the shape is ambiguous); pixel sizes from ``--spacing``, or a ``spacing``
    attribute with a ``unit``."""
    _scene_index(scene, ("Image:0",), path.name)
    attrs = dict(array.attrs)
    names = getattr(getattr(array, "metadata", None), "dimension_names", None) or attrs.get("_ARRAY_DIMENSIONS") or attrs.get("axes")
    letters = ""
    if isinstance(names, str):
        names = list(names)
    if isinstance(names, (list, tuple)) and len(names) == len(array.shape) and all(names):
        letters = "".join(str(n)[:1].upper() for n in names)
        if not set(letters) <= set(CANONICAL) or len(set(letters)) != len(letters):
            letters = ""
    axes = letters or "?" * len(array.shape)
    spacing, problems = {}, []
    given, unit = attrs.get("spacing"), attrs.get("unit") or attrs.get("units")
    if letters and given is not None and unit:
        sizes = [given] * len(letters) if isinstance(given, (int, float)) else list(given)
        spatial = [a for a in letters if a in "ZYX"]
        if len(sizes) == len(letters):
            sizes = [v for a, v in zip(letters, sizes) if a in "ZYX"]
        for axis, size in zip(spatial, sizes[-len(spatial):] if len(sizes) >= len(spatial) else []):
            um = _read_sizes(lambda: file_pixel_size(size, unit, path.name, axis, "Zarr attributes' spacing"),
                             problems)
            if um is not None:
                spacing[axis] = um
    spacing.update({"problem": problems[0]} if problems else {})
    if not letters and len(array.shape) >= 2:
        axes = "?" * (len(array.shape) - 2) + "YX"  # rows and columns last, as a plain TIFF
    return _Raw(zarr_dask(array, path), axes, "Zarr dimension names" if letters else "", spacing, ("Image:0",),
                "Image:0")
