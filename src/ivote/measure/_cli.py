"""``ivote measure IMAGE --labels labels.tif [--points points.csv] [--spacing Z Y X | Y X] --out table.csv``.

One row per nucleus of the label image: centroid, area or volume, equivalent diameter, axis
lengths, solidity, mean and integrated intensity of IMAGE, and the detection score of the
point inside it when ``--points`` is given. ``--regions annotations.geojson`` (QuPath annotations)
adds each nucleus' region and writes the nuclei per region and per mm² (``--regions-out``). Units are in the column names (``area_um2``,
``volume_um3``; ``px`` without a spacing). The centroids are world positions: they include the
image's position (``ImageFile.origin``), as ``ivote detect``'s ``*_um`` columns and the napari dock's
table do. Written atomically.
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["demo", "register"]


def _cmd_measure(args) -> int:
    import numpy as np

    from .._files import command_spacing, read_for_detection
    from .._progress import cli_progress
    from .._units import to_micrometres
    from ..io import check_output_path, read_image, read_points_csv
    from ._measure import measure_nuclei, write_table_csv

    check_output_path(args.out, (".csv",), inputs=(args.input, args.labels, args.points))
    regions_out = None
    if args.regions:
        regions_out = check_output_path(args.regions_out or _regions_path(args.out), (".csv",),
                                        name="--regions-out", inputs=(args.input, args.labels, args.out))
    if str(args.scene).lower() == "all":
        raise ValueError("--scene all is not supported by 'ivote measure': name one scene and its labels")
    start = time.perf_counter()
    with cli_progress(args.quiet) as progress:
        with progress.step("reading the image and labels"):
            image, found = read_for_detection(args.input, axes=args.axes, channel=args.channel, scene=args.scene)
            labels, label_spacing = read_image(args.labels)
        if "T" in found.axes:
            raise ValueError(f"IMAGE is a time-lapse ({found.axes}); measure one frame at a time")
        if image.shape != labels.shape and not (image.ndim == labels.ndim + 1 and image.shape[:-1] == labels.shape):
            raise ValueError(f"IMAGE {image.shape} and --labels {labels.shape} must have the same shape "
                             "(IMAGE may add a channel axis)")
        table = read_points_csv(args.points) if args.points else None
        fallback = label_spacing if label_spacing is not None else (table.spacing if table else None)
        spacing = command_spacing(found, args.spacing, command="ivote measure", fallback=fallback)
        with_scores = table is not None and table.scores is not None
        um_per_unit = to_micrometres(1.0, args.units)  # the image's position (micrometres) in the spacing's unit
        translate = tuple(o / um_per_unit for o in found.origin) \
            if found.origin is not None and spacing is not None and um_per_unit else None
        with progress.step("measuring nuclei"):
            columns = measure_nuclei(labels, image, spacing=spacing, translate=translate, units=args.units,
                                     scores=table.scores if with_scores else None,
                                     points=table.points if with_scores else None)
        counts = None
        if args.regions:
            with progress.step("counting nuclei per region"):
                counts = _count_regions(args.regions, columns, labels.ndim, spacing, args.units)
        with progress.step("writing the table"):
            out = write_table_csv(args.out, columns)
            if counts is not None:
                write_table_csv(regions_out, counts)
    n = len(columns["label"])
    size = next(name for name in columns if name.startswith(("area_", "volume_")))
    where = "no pixel size: values in pixels" if spacing is None else \
        f"pixel size {' x '.join(f'{s:g}' for s in spacing)} {args.units}"
    median = f", median {size.split('_')[0]} {float(np.median(columns[size])):.4g} {size.split('_')[1]}" if n else ""
    print(f"{n} nuclei measured ({where}){median} "
          f"in {time.perf_counter() - start:.2f} s -> {out}")
    if counts is not None:
        for name, n, area, density in zip(counts["region"], counts["nuclei"], counts["area_mm2"],
                                          counts["nuclei_per_mm2"]):
            print(f"  {name}: {n} nuclei in {area:.4g} mm² ({density:.5g} per mm²)")
        print(f"  nuclei per region -> {regions_out}")
    return 0


def _regions_path(out) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}_regions.csv")


def _count_regions(path, columns, ndim: int, spacing, units):
    """Each nucleus' region (a ``region`` column added to ``columns``) and the per-region counts."""
    import numpy as np

    from ..export._geojson import read_regions_geojson
    from ._regions import count_in_regions, region_of_points

    if ndim != 2:
        raise ValueError("--regions takes a 2D label image (QuPath annotations are drawn on one plane)")
    if spacing is None:
        raise ValueError("--regions counts nuclei per mm²: it needs the pixel size; give --spacing Y X "
                         "(in --units, micrometres by default) or an image whose metadata has its pixel sizes")
    regions = read_regions_geojson(path)
    centroids = np.column_stack([columns["centroid_y_px"], columns["centroid_x_px"]])
    columns["region"] = region_of_points(centroids, regions)
    return count_in_regions(centroids, regions, spacing=spacing, units=units)


def register(subparsers) -> None:
    from .._files import add_input_options

    parser = subparsers.add_parser(
        "measure",
        help="measure every nucleus of a label image; write a CSV table in physical units",
        description="Measure every nucleus of a label image (scikit-image regionprops with the pixel spacing): "
                    "centroid, area or volume, equivalent diameter, axis lengths, solidity, mean and integrated "
                    "intensity, and the detection score with --points. Units are in the column names.",
    )
    parser.add_argument("input", metavar="IMAGE",
                        help="intensity image the labels were made from (OME-TIFF, TIFF, OME-Zarr, PNG...), same "
                             "shape; RGB gives one intensity column per channel, --channel picks a stain")
    parser.add_argument("--labels", required=True,
                        help="label image (OME-TIFF, TIFF, OME-Zarr), 0 for background, e.g. from 'ivote segment'")
    parser.add_argument("--points", default=None,
                        help="points CSV from 'ivote detect': each nucleus gets the score of the point inside it")
    parser.add_argument("--spacing", type=float, nargs="+", metavar="S",
                        help="pixel size per axis: Z Y X or Y X (default: from IMAGE's metadata, else the labels', "
                             "else the points CSV's '# scale', else none: units are pixels)")
    parser.add_argument("--units", default="um",
                        help="unit of the spacing, used in the column names (default: um, as in area_um2)")
    parser.add_argument("--regions", default=None, metavar="annotations.geojson",
                        help="QuPath GeoJSON of annotations (e.g. Tumor, Stroma): each nucleus gets the region its "
                             "centroid is in, and --regions-out counts the nuclei per region and per mm² (needs "
                             "the pixel size)")
    parser.add_argument("--regions-out", default=None, metavar="regions.csv",
                        help="per-region table: region, nuclei, area_mm2, nuclei_per_mm2 (default: OUT_regions.csv)")
    add_input_options(parser)
    parser.add_argument("--out", required=True, metavar="table.csv", help="output CSV, one row per nucleus")
    parser.set_defaults(func=_cmd_measure)


def demo(sample_2d, sample_3d, out_dir) -> list[str]:
    """Measure the demo's segmentations (``segment_<sample>.tif``) into ``measure_<sample>.csv``."""
    import numpy as np

    from ..io import read_image
    from ._measure import measure_nuclei, write_table_csv

    lines = []
    for name, sample in (("sample_2d", sample_2d), ("sample_3d", sample_3d)):
        path = Path(out_dir) / f"segment_{name}.tif"
        if not path.is_file():
            continue
        columns = measure_nuclei(read_image(path)[0], sample.image, spacing=sample.spacing)
        out = write_table_csv(Path(out_dir) / f"measure_{name}.csv", columns)
        truth = measure_nuclei(sample.labels, spacing=sample.spacing)
        key = "equivalent_diameter_um"
        lines.append(f"measure {name}: {len(columns['label'])} nuclei, median equivalent diameter "
                     f"{np.median(columns[key]):.2f} um (truth {np.median(truth[key]):.2f} um) -> {out.name}")
    return lines
