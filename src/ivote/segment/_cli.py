"""``ivote segment INPUT --points points.csv --radius R|auto [--spacing Z Y X | Y X]
[--polarity bright|dark] [--iterations N] --out labels.tif``.

Seeds are the points of a CSV written by ``ivote detect`` (pixel coordinates,
the frame ``t`` of a time-lapse); the output is int32 labels (label k + 1 for
seed k, per frame) as OME-TIFF or OME-Zarr with the pixel sizes, written
atomically.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

__all__ = ["demo", "register"]


def _grey(image, polarity, is_rgb):
    """RGB(A) H&E input: the hematoxylin density, nuclei bright."""
    if is_rgb:
        from ..detect import hematoxylin_density

        return hematoxylin_density(image), "bright"
    return image, polarity


def _auto_radius(args, image, spacing, polarity, *, chunked=False) -> float:
    """``--radius auto``: the radius 'ivote detect --radius auto' finds on the same image (its first frame
    for a time-lapse), printed; a number is returned as given."""
    if args.radius != "auto":
        return args.radius
    if chunked:  # a central crop, as 'ivote detect --chunks' estimates it: the image may not fit in memory
        from ..distributed._detect import _estimate_radius

        radius = _estimate_radius(image, image.shape, spacing, polarity, args.backend)
    else:
        from ..detect import estimate_radius

        radius = estimate_radius(image, spacing=spacing, polarity=polarity, backend=args.backend)
    if not args.quiet:
        print(f"radius {radius:.4g} {'px' if spacing is None else 'um'} (auto, estimated from the image)",
              file=sys.stderr)
    return float(radius)


def _output_format(args) -> str:
    """``--format``, else from ``--out``'s suffix: 'labels' (OME-TIFF/OME-Zarr), 'geojson' or 'roi-zip'."""
    if args.format is not None:
        return args.format
    suffix = Path(args.out).suffix.lower()
    return {".geojson": "geojson", ".json": "geojson", ".zip": "roi-zip"}.get(suffix, "labels")


_OUT_SUFFIXES = {"labels": (".tif", ".tiff", ".zarr"), "geojson": (".geojson", ".json"), "roi-zip": (".zip",)}


def _cmd_segment_chunked(args) -> int:
    """Segment block by block on Dask (``ivote.distributed.segment_chunked``); labels to OME-Zarr, or a 2D
    image's outlines (GeoJSON, ROI set) streamed band by band of rows from the labels' Zarr store."""

    import numpy as np

    from .._files import command_spacing, open_image, write_image
    from .._progress import cli_progress
    from ..distributed import segment_chunked
    from ..distributed._segment import DEFAULT_HOPS
    from ..distributed._options import chunks_option, engine
    from ..io import check_output_path, read_points_csv

    out_format = _output_format(args)
    out = check_output_path(args.out, (".zarr",) if out_format == "labels" else _OUT_SUFFIXES[out_format],
                            inputs=(args.input, args.points))
    image = open_image(args.input, axes=args.axes, scene=None if str(args.scene).lower() == "all" else args.scene)
    image = image.select_channel(args.channel)
    if set(image.axes) - set("ZYX") and image.axes != "YXS":
        raise ValueError(f"{args.input} has axes {image.axes}: chunked segmentation takes one grey YX or ZYX "
                         "image or a YX RGB one (pick a channel with --channel, or drop --chunks/--scheduler)")
    if out_format != "labels" and len(image.spatial_axes) != 2:
        raise ValueError(f"--format {out_format} block by block takes a 2D image (its outlines are streamed band "
                         f"by band of rows); {args.input} is {image.axes}: write the labels to .zarr, or drop "
                         "--chunks/--scheduler")
    grey, polarity = image.data, args.polarity
    if image.is_rgb:  # H&E: each block's hematoxylin density, as _grey in memory (detect/_colour_blocks.py)
        from ..detect._colour_blocks import HematoxylinBlocks

        grey, polarity = HematoxylinBlocks(image.data), "bright"
    table = read_points_csv(args.points)
    spacing = command_spacing(image, args.spacing, command="ivote segment", fallback=table.spacing)
    points = np.asarray(table.points, dtype=float).reshape(-1, len(image.spatial_axes))
    radius = _auto_radius(args, grey, spacing, polarity, chunked=True)
    start = time.perf_counter()
    from .._atomic import private_folder

    with private_folder(out, "ivote-labels") as scratch:  # this run's own: never shared, removed on SIGTERM
        with engine(args, worker_memory=False):
            if not args.quiet:
                print(f"segmenting {len(points)} seeds in {'x'.join(map(str, image.shape))} voxels block by block "
                      "(Dask progress below)", file=sys.stderr)
            result = segment_chunked(
                grey, points, radius, spacing=spacing, chunks=chunks_option(args),
                hops=DEFAULT_HOPS if args.hops is None else args.hops,
                out=str(scratch), progress=not args.quiet, polarity=polarity, iterations=args.iterations,
                backend=args.backend, memory_limit=args.memory_limit)
            import dask.array as da

            translate = image.origin if spacing is not None else None
            if out_format != "labels":  # outlines of the labels' store, band by band (ivote.export)
                from ..export import export_labels

                with cli_progress(args.quiet) as progress, progress.step(f"writing the outlines ({out_format})"):
                    written = export_labels(out, result.labels, to=out_format, spacing=spacing, translate=translate)
            else:
                with cli_progress(args.quiet) as progress, progress.step("writing the labels"):
                    written = write_image(out, da.from_zarr(result.labels), axes=image.spatial_axes, spacing=spacing,
                                          translate=translate, name="labels")
    print(f"{result.count} nuclei from {len(points)} seeds in {time.perf_counter() - start:.2f} s, blocks of "
          f"{'x'.join(map(str, result.chunks))}, {result.iterations} iterations, {result.passes} pass(es), "
          f"{result.seam_merges} seam merges -> {written}")
    return 0


def _cmd_segment(args) -> int:
    import numpy as np

    from ..distributed._options import engine_requested

    if engine_requested(args) or args.hops is not None:
        return _cmd_segment_chunked(args)

    from .._files import command_spacing, input_scenes, read_for_detection, scene_path, write_image
    from .._progress import cli_progress
    from ..io import check_output_path, read_points_csv
    from ._segment import segment_nuclei

    out_format = _output_format(args)
    check_output_path(args.out, _OUT_SUFFIXES[out_format], inputs=(args.input, args.points))
    for scene, out in input_scenes(args):
        with cli_progress(args.quiet) as progress, progress.step("reading the image"):
            image, found = read_for_detection(args.input, axes=args.axes, channel=args.channel, scene=scene,
                                              lazy_frames=True)
        points_path = args.points
        if str(args.scene).lower() == "all" and scene_path(args.points, found.scene).is_file():
            points_path = scene_path(args.points, found.scene)  # as 'ivote detect --scene all' wrote them
        table = read_points_csv(points_path)
        from ..detect._cli import warn_grey_rgb

        warn_grey_rgb(args.input, image, found.is_rgb, args.channel, "ivote segment")
        raw = image  # --radius auto reads it as 'ivote detect' does (RGB: cropped before its colour conversion)
        image, polarity = _grey(image, args.polarity, found.is_rgb)
        spatial = found.spatial_axes
        ndim = len(spatial)
        spacing = command_spacing(found, args.spacing, command="ivote segment", fallback=table.spacing)
        points = np.asarray(table.points, dtype=float)
        if points.size == 0:
            points = np.zeros((0, ndim))
        if points.ndim != 2 or points.shape[1] != ndim:
            napari_frames = table.columns[:1] == ("axis-0",) and "T" in found.axes and points.shape[-1] == ndim + 1
            raise ValueError(f"--points holds {points.shape[-1]}D points but the image is {ndim}D ({found.axes})" + (
                ": napari's points CSV does not say that its axis-0 is the frame; save the points with napari-ivote's "
                "writer (File > Save, 'IVote nuclei points CSV'), which writes a 't' column" if napari_frames else ""))
        first = raw[0] if "T" in found.axes else raw  # a time-lapse: one radius, the first frame's
        radius = _auto_radius(args, np.asarray(first.compute() if hasattr(first, "compute") else first), spacing,
                              args.polarity)
        options = dict(radius=radius, spacing=spacing, polarity=polarity, iterations=args.iterations,
                       backend=args.backend)
        start = time.perf_counter()
        if "T" in found.axes and out_format != "labels":
            raise ValueError(f"{found.axes} is a time-lapse: --format {out_format} takes one 2D or 3D image; write "
                             "the labels (.ome.tif) and export one frame")
        if "T" in found.axes:
            from .._frames import segment_frames

            if table.times is None:
                raise ValueError(f"{found.axes} is a time-lapse but --points has no 't' column; detect it with "
                                 f"'ivote detect' on the same file")
            with cli_progress(args.quiet) as progress, progress.step(f"segmenting nuclei in {found.n_frames} frames"):
                labels = segment_frames(image, np.column_stack([table.times, points]), **options)
            axes = "T" + spatial
            report = None
        else:
            if table.times is not None and len(np.unique(table.times)) > 1:
                raise ValueError("--points has several frames ('t' column) but the image has no T axis")
            with cli_progress(args.quiet) as progress, \
                    progress.step("segmenting nuclei (level-set iterations)", total=args.iterations) as task:
                labels, report = segment_nuclei(image, points, return_report=True,
                                                iter_callback=lambda done, changed: task.update(done), **options)
            labels = labels.get() if hasattr(labels, "get") else labels
            axes = spatial
        seconds = time.perf_counter() - start
        with cli_progress(args.quiet) as progress, progress.step("writing the labels"):
            if out_format != "labels":  # outlines with their measurements, for QuPath or Fiji (ivote.export)
                from ..export import export_labels

                out = export_labels(out, np.asarray(labels), to=out_format, spacing=spacing,
                                    translate=found.origin if spacing is not None else None)
            else:
                out = write_image(out, np.asarray(labels).astype(np.int32), axes=axes, spacing=spacing,
                                  translate=found.origin if spacing is not None else None, name="labels")
        if report is None:
            n_objects = sum(len(np.unique(frame)) - 1 for frame in labels)
            report = f"{n_objects} nuclei from {len(points)} seeds"
        print(f"{report} in {seconds:.2f} s -> {out}")
    return 0


def register(subparsers) -> None:
    from .._files import add_input_options
    from ..detect._cli import _radius

    parser = subparsers.add_parser(
        "segment",
        help="outline nuclei by interacting level sets seeded at points; write a label TIFF",
        description="Segment nuclei by many interacting level sets (one per seed, GPU when available).",
    )
    parser.add_argument("input", metavar="INPUT",
                        help="image: OME-TIFF, TIFF, OME-Zarr, PNG/JPEG (CZI, ND2, LIF with napari-ivote[formats]); "
                             "2D, 2D RGB (H&E), 3D, multi-channel (--channel), time-lapse (labels keep T)")
    parser.add_argument("--points", required=True, help="seed points CSV, as written by 'ivote detect'")
    parser.add_argument("--radius", type=_radius, required=True,
                        help="largest nucleus radius, in the units of the spacing (pixels without one); 'auto' "
                             "estimates it from the image as 'ivote detect --radius auto' does (printed)")
    parser.add_argument("--spacing", type=float, nargs="+", metavar="S",
                        help="pixel size per axis: Z Y X or Y X (default: from the image's metadata, else "
                             "the '# scale' line of the points CSV, else 1)")
    parser.add_argument("--polarity", choices=("bright", "dark"), default="bright",
                        help="bright nuclei on dark or dark on bright (default: bright; RGB input: hematoxylin)")
    parser.add_argument("--iterations", type=int, default=300,
                        help="most level-set iterations; fewer when the fronts stop moving (default 300)")
    parser.add_argument("--backend", choices=("auto", "numpy", "numba", "cupy"), default="auto",
                        help="array backend (default: GPU when available, else the compiled CPU kernels)")
    add_input_options(parser)
    from ..distributed._options import add_engine_options

    chunked = parser.add_argument_group("large images (block by block on Dask; see docs/scale.md); any of these "
                                        "writes the labels to OME-Zarr (2D: or their outlines, --format), with the "
                                        "in-memory labels")
    add_engine_options(
        chunked,
        chunks_help="voxels each block owns, one number or one per axis (default: about 256 per axis, 2048 in 2D, "
                    "halved until a block fits --memory-limit)",
        memory_help="memory one block's segmentation may use: GPU memory per GPU (enforced), host memory on the "
                    "CPU, e.g. 8GB (default: no limit)")
    chunked.add_argument("--hops", type=int, default=None, metavar="K",
                         help="halo: evolve with each block's nuclei those within K overlapping boxes (default 2)")
    parser.add_argument("--out", required=True,
                        help="output labels (int32): OME-TIFF (.ome.tif, .tif) or OME-Zarr (.ome.zarr, for large "
                             "ones), with the pixel sizes in micrometres; or outlines: .geojson, .zip (--format)")
    parser.add_argument("--format", choices=("labels", "geojson", "roi-zip"), default=None,
                        help="labels (an image), geojson (QuPath polygon detections with their measurements) or "
                             "roi-zip (Fiji ROI set), see docs/qupath-fiji.md (default: from --out's suffix)")
    parser.set_defaults(func=_cmd_segment)


def demo(sample_2d, sample_3d, out_dir) -> list[str]:
    """Segment both samples seeded by the detect stage's points (``detect_<sample>.csv`` in
    ``out_dir``, as a user would chain ``ivote detect`` and ``ivote segment``), or by the true
    centres when there are none; write ``segment_<sample>.tif``; report F1 at IoU 0.5 and mean
    matched IoU against the true labels."""
    import numpy as np

    from .._files import write_image
    from ..io import read_points_csv
    from ..metrics import match_labels
    from ._segment import segment_nuclei

    lines = []
    for name, sample in (("sample_2d", sample_2d), ("sample_3d", sample_3d)):
        points_csv = Path(out_dir) / f"detect_{name}.csv"
        if points_csv.is_file():
            seeds, seed_name = read_points_csv(points_csv).points, "detections"
        else:
            seeds, seed_name = sample.centers, "true centres"
        start = time.perf_counter()
        labels = segment_nuclei(sample.image, seeds, radius=sample.radius, spacing=sample.spacing)
        labels = labels.get() if hasattr(labels, "get") else labels
        seconds = time.perf_counter() - start
        match = match_labels(labels, sample.labels)
        path = write_image(Path(out_dir) / f"segment_{name}.tif", labels.astype(np.int32),
                           axes="ZYX"[-labels.ndim:], spacing=sample.spacing, name="labels")
        lines.append(
            f"segment {name} seeded by {len(seeds)} {seed_name}: {match.n_predicted} nuclei "
            f"({match.n_true} true), F1@0.5 {match.f1:.3f}, mean IoU {match.mean_matched_iou:.3f}, "
            f"{seconds:.2f} s -> {path.name}"
        )
    return lines
