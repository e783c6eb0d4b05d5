"""``ivote detect INPUT --radius R|auto [--spacing Z Y X | Y X] [--polarity bright|dark]
[--threshold auto|otsu|reference|none|VALUE] [--min-contrast K] [--blur B] --out points.csv``.

With ``--chunks``, ``--scheduler``, ``--gpus`` or ``--memory-limit`` a grey image
is read lazily (OME-Zarr, TIFF) and detected
block by block on Dask (``ivote.distributed.detect_chunked``), with the
in-memory result. A quoted pattern of files with ``--out-dir DIR`` runs each
file as a task of the same Dask engine: one table per file and
``DIR/summary.csv``.

Writes one row per detected nucleus: the frame ``t`` of a time-lapse, pixel
coordinates (``z,y,x`` or ``y,x``), ``score`` and physical coordinates
(``z_um,...``: ``pixel * spacing + origin``, the image's position, ``ImageFile.origin``, kept as
``# translate``; ``z_px,...`` when no spacing is known). The image is read by
:mod:`ivote._files` (``--axes``, ``--channel``, ``--scene``).
``--threshold none`` writes every local maximum, for precision-recall sweeps:
it also turns the contrast test off unless ``--min-contrast`` is given.
"""

from __future__ import annotations

import argparse

import time
from pathlib import Path

__all__ = ["demo", "register"]

def _threshold(text: str):
    lowered = text.strip().lower()
    if lowered in ("auto", "otsu", "reference", "none"):
        return lowered
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--threshold must be 'auto', 'otsu', 'reference', 'none' or a number; got {text!r}") from None

def _radius(text: str):
    """argparse type of --radius: a number or 'auto' (a bad value is argparse's one-line usage error)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number or 'auto'; got {text!r}") from None

def _cmd_detect(args) -> int:
    from .._files import input_scenes
    from ..distributed._options import engine_requested
    from ..io import check_output_path

    if len(args.input) > 1:  # an unquoted pattern the shell expanded: a batch of the files it named
        return _cmd_batch(args, files=args.input)
    args.input = args.input[0]
    if args.out_dir is not None or any(c in args.input for c in "*?["):
        return _cmd_batch(args)
    if args.out is None:
        raise ValueError("--out is required (or --out-dir DIR with a pattern of files, e.g. 'folder/*.tif')")
    check_output_path(args.out, (f".{_output_format(args.out, args.format)}",), inputs=(args.input,))
    settings = _settings(args)
    if args.detector and engine_requested(args):
        raise ValueError("--detector is not applied block by block; drop --chunks/--scheduler/--gpus/--memory-limit "
                         "(batches of files with --out-dir take it)")
    for scene, out in input_scenes(args):
        if engine_requested(args):
            line = _detect_chunked_file(args, scene, out, settings)
        else:
            line, _ = _detect_file(args.input, scene, out, settings, quiet=args.quiet)
        print(line)
    return 0


def _settings(args) -> dict:
    """What a detection of one file needs from the command line (picklable: batches send it to workers)."""
    if args.radius is None and not args.detector:
        raise ValueError("--radius is required (a number, or 'auto'), unless --detector gives it")
    threshold = _threshold(args.threshold)
    min_contrast = args.min_contrast
    if min_contrast is None:
        min_contrast = 0.0 if threshold == "none" else 3.0
    detector = None
    if args.detector:
        from ..learn._detector import load_detector

        detector = load_detector(args.detector)  # a bad file fails before any work
    radius = detector.radius if args.radius is None else args.radius
    polarity = args.polarity or (detector.polarity if detector is not None else "bright")
    options = dict(radius=radius, polarity=polarity, blur=args.blur, threshold=threshold,
                   min_contrast=min_contrast, backend=args.backend, stains=None if args.stains == "fixed" else "auto")
    if detector is not None:
        options["detector"] = args.detector
    return dict(options=options, features=args.features, axes=args.axes, channel=args.channel, spacing=args.spacing,
                format=args.format)


def warn_grey_rgb(path, image, is_rgb: bool, channel, command: str) -> None:
    """Say so when an RGB(A) file holds a grey image (red = green = blue, e.g. a fluorescence image exported as
    'RGB Color'): read as H&E by default, its nuclei are the wrong ones; ``--channel 0`` reads it as grey."""
    import sys

    from ._colour import GREY_RGB_NOTE, is_grey_rgb

    if is_rgb and channel is None and is_grey_rgb(image):
        print(f"{command}: warning: {path} {GREY_RGB_NOTE}: give --channel 0 to read it as a grey image",
              file=sys.stderr)


def _detect_file(path, scene, out, settings, *, quiet: bool = True):
    """Detect the nuclei of one file in memory and write its points; (summary line, count)."""
    from .._files import command_spacing, read_for_detection
    from .._progress import cli_progress

    options = dict(settings["options"])
    learned = {"learn": "reconstruction", "learn-map": "nucleus_map"}.get(settings["features"])
    if settings["features"] and learned is None:
        from ..features import ConvRBM

        options["features"] = ConvRBM.load(settings["features"])
    with cli_progress(quiet) as progress, progress.step("reading the image"):
        image, found = read_for_detection(path, axes=settings["axes"], channel=settings["channel"], scene=scene,
                                          lazy_frames=True)
    warn_grey_rgb(path, image, found.is_rgb, settings["channel"], "ivote detect")
    spacing = command_spacing(found, settings["spacing"], command="ivote detect")
    options["spacing"] = spacing
    if learned:  # the recommended ConvRBM, fitted on this image (docs/features.md)
        from ..features import NucleusFeatures

        radius = options["radius"]
        options["features"] = NucleusFeatures(None if radius == "auto" else radius, spacing=spacing,
                                              polarity=options["polarity"], source=learned)
    start = time.perf_counter()
    progress = cli_progress(quiet)
    if "T" in found.axes:
        from .._frames import detect_frames

        with progress as bar, bar.step(f"detecting nuclei in {found.n_frames} frames"):
            result = detect_frames(image, **options)
        points, times, n_maxima = result.points[:, 1:], result.times, sum(len(f.candidates) for f in result.frames)
        first = result.frames[0]
        where = f"{found.n_frames} frames, "
    else:
        from ._dispatch import iterative_voting

        with progress as bar, bar.step("detecting nuclei (voting passes)") as task:
            result = first = iterative_voting(
                image, iter_callback=lambda index, total: task.update(index + 1, total), **options)
        points, times, n_maxima, where = result.points, None, len(result.candidates), ""
    seconds = time.perf_counter() - start
    out = _write_points(out, _output_format(out, settings["format"]), points, result.scores, spacing, times,
                        first, found.origin)
    units = "um" if spacing is not None else "px"
    scene_note = f"scene {found.scene}: " if len(found.scenes) > 1 else ""
    threshold = f"threshold {result.threshold:.4g}" if n_maxima else "no maximum stands out"
    line = (f"{scene_note}{len(points)} nuclei (of {n_maxima} maxima, {threshold}) "
            f"radius {first.radius:.4g} {units}{' (auto)' if first.radius_estimated else ''}, {where}"
            f"{first.n_passes} passes on {first.backend} in {seconds:.2f} s -> {out}")
    return line, len(points)


def _open_grey(path, args, scene):
    """The file's nuclear stain as a lazy array (ImageFile), refused if it cannot be chunked."""
    from .._files import open_image

    image = open_image(path, axes=args.axes, scene=scene).select_channel(args.channel)
    if set(image.axes) - set("ZYX") and image.axes != "YXS":  # YXS: H&E, block by block (detect/_colour_blocks.py)
        raise ValueError(f"{path} has axes {image.axes} (shape {image.shape}); block-by-block detection takes one "
                         "grey 2D or 3D image or a 2D RGB one: pick a channel with --channel, or run a time-lapse "
                         "without --chunks/--scheduler/--gpus/--memory-limit")
    return image


def _detect_chunked_file(args, scene, out, settings) -> str:
    """Detect one file block by block on the Dask engine (``ivote.distributed.detect_chunked``)."""
    from .._files import command_spacing
    from .._progress import cli_progress
    from ..distributed import detect_chunked
    from ..distributed._options import chunks_option, engine

    image = _open_grey(args.input, args, scene)
    spacing = command_spacing(image, args.spacing, command="ivote detect")
    options = dict(settings["options"])
    if image.is_rgb:
        from ._colour_blocks import slide_tissue

        options["tissue"] = None if args.tissue == "none" else slide_tissue(image)
    elif options.pop("stains") is not None:
        raise ValueError("--stains is for RGB images")
    if settings["features"]:
        raise ValueError("--features is not detected block by block; drop --chunks/--scheduler/--gpus/--memory-limit")
    radius = options.pop("radius")
    start = time.perf_counter()
    with cli_progress(args.quiet) as bar, engine(args, worker_memory=False), \
            bar.step("detecting block by block") as task:
        result = detect_chunked(image.data, radius, spacing=spacing, chunks=chunks_option(args),
                                memory_limit=args.memory_limit, progress=task.update, **options)
    seconds = time.perf_counter() - start
    out = _write_points(out, _output_format(out, settings["format"]), result.points, result.scores, spacing, None,
                        result, image.origin)
    units = "um" if spacing is not None else "px"
    voxels = "x".join(map(str, image.shape))
    return (f"{len(result.points)} nuclei (of {len(result.candidates)} maxima, threshold {result.threshold:.4g}) "
            f"radius {result.radius:.4g} {units}{' (auto)' if result.radius_estimated else ''}, {voxels} voxels "
            f"block by block, {result.n_passes} passes on "
            f"{result.backend} in {seconds:.2f} s -> {out}")


def _batch_task(path, out, settings):
    """One file of a batch, as a Dask task: (count, seconds, error or '')."""
    start = time.perf_counter()
    try:
        _, count = _detect_file(path, None, out, settings)
    except Exception as exc:  # one bad file does not stop the batch: the summary names it
        return -1, time.perf_counter() - start, " ".join(f"{type(exc).__name__}: {exc}".split())
    return count, time.perf_counter() - start, ""


def _batch_outputs(files, out_dir: Path, suffix: str) -> list:
    """One output per file, named after it; files of the same name get their folder's name too."""
    stems = [Path(f).name.split(".")[0] for f in files]
    names = []
    for f, stem in zip(files, stems):
        name = stem if stems.count(stem) == 1 else f"{Path(f).parent.name}_{stem}"
        names.append(name if name not in names else f"{name}_{len(names)}")
    return [out_dir / f"{name}.{suffix}" for name in names]


def _cmd_batch(args, files=None) -> int:
    """``ivote detect 'folder/*.tif' --out-dir DIR`` (or the ``files`` the shell expanded an unquoted pattern
    to): every file as a task of the Dask engine, one points table per file and ``DIR/summary.csv``
    (file, count, seconds, error)."""
    import glob

    from .._atomic import write_atomic
    from .._progress import cli_progress
    from ..distributed._options import engine
    from ..distributed._tasks import _Runner

    if args.out_dir is None:
        if files:
            shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
            raise ValueError(f"{len(files)} input files ({shown}): give --out-dir DIR (one output per file)")
        raise ValueError(f"{args.input!r} is a pattern of files: give --out-dir DIR (one output per file)")
    if args.out is not None:
        raise ValueError("give --out-dir for a batch of files, not --out")
    if args.chunks or args.memory_limit is not None:
        raise ValueError("a batch detects each file in memory as one task: --chunks and --memory-limit are for one "
                         "file at a time")
    if files is None:
        from .._atomic import is_zarr_store  # an OME-Zarr is a folder: matched too

        files = sorted(f for f in glob.glob(args.input) if Path(f).is_file() or is_zarr_store(f)) \
            if any(c in args.input for c in "*?[") else [args.input]
    if not files:
        raise FileNotFoundError(f"no file matches {args.input!r}")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = args.format or "csv"
    outputs = _batch_outputs(files, out_dir, suffix)
    settings = _settings(args)
    start = time.perf_counter()
    with cli_progress(args.quiet) as bar, engine(args), bar.step(f"detecting nuclei in {len(files)} files") as task:
        results = _Runner(task.update, len(files)).run(
            _batch_task, [(f, o, settings) for f, o in zip(files, outputs)], None)
    width = max(len(f) for f in files)
    print(f"{'file':<{width}}  {'count':>7}  {'seconds':>8}")
    for f, (count, seconds, error) in zip(files, results):
        print(f"{f:<{width}}  {count if count >= 0 else 'failed':>7}  {seconds:8.2f}" + (f"  {error}" if error else ""))
    failed = sum(1 for count, _, _ in results if count < 0)
    total = sum(count for count, _, _ in results if count >= 0)

    def write(tmp: Path) -> None:
        import csv

        with tmp.open("w", newline="", encoding="utf-8") as stream:
            table = csv.writer(stream)
            table.writerow(["file", "output", "count", "seconds", "error"])
            for f, o, (count, seconds, error) in zip(files, outputs, results):
                table.writerow([f, o.name if count >= 0 else "", count if count >= 0 else "", f"{seconds:.3f}", error])

    summary = write_atomic(out_dir / "summary.csv", write)
    print(f"{len(files) - failed} of {len(files)} files, {total} nuclei in {time.perf_counter() - start:.2f} s -> "
          f"{out_dir}/ ({summary.name})")
    return 1 if failed else 0


def _output_format(out, given) -> str:
    suffix = str(out).lower().rsplit(".", 1)[-1]
    return given or {"parquet": "parquet", "geojson": "geojson"}.get(suffix, "csv")


def _write_points(out, out_format, points, scores, spacing, times, found, origin=None):
    """Write the table, with the radius used (``found.radius``, and whether it was estimated) and the image's
    ``origin`` (``ImageFile.origin``, micrometres) as its translate, as the labels of ``ivote segment`` keep it."""
    from ..io import write_points_csv, write_points_parquet

    if out_format == "geojson":  # QuPath detections in pixels (ivote.export)
        from ..export import write_points_geojson

        return write_points_geojson(out, points, scores, times=times)
    write = write_points_parquet if out_format == "parquet" else write_points_csv
    return write(out, points, scores, spacing=spacing, translate=origin if spacing else None,
                 units="um" if spacing else None, times=times, radius=found.radius,
                 radius_estimated=found.radius_estimated)


def register(subparsers) -> None:
    from .._files import add_input_options

    parser = subparsers.add_parser(
        "detect",
        help="find nucleus centres by iterative voting; write a points CSV",
        description="Find nucleus centres by iterative voting (GPU when available) and write them as CSV.",
    )
    parser.add_argument("input", metavar="INPUT", nargs="+",
                        help="image: OME-TIFF, TIFF, OME-Zarr, PNG/JPEG (CZI, ND2, LIF with napari-ivote[formats]); "
                             "2D, 2D RGB (H&E), 3D, multi-channel (--channel), time-lapse (a t column); or a quoted "
                             "pattern of files ('folder/*.tif', or several files) with --out-dir")
    parser.add_argument("--radius", default=None, type=_radius,
                        help="largest nucleus radius (the semi-major axis of the larger nuclei, about 1.5x the "
                             "typical radius), in the units of the spacing (pixels without one); if elongated "
                             "nuclei are found twice, increase it; 'auto' estimates it from the image (printed); "
                             "required unless --detector gives it")
    parser.add_argument("--detector", default=None, metavar="JSON",
                        help="a detector learned from corrected points (ivote learn): every maximum is scored by "
                             "its probability of being a nucleus (docs/learn.md)")
    parser.add_argument("--spacing", type=float, nargs="+", metavar="S",
                        help="pixel size per axis: Z Y X or Y X (default: from the file, else 1)")
    parser.add_argument("--polarity", choices=("bright", "dark"), default=None,
                        help="bright nuclei on dark (fluorescence) or dark on bright (default: bright); "
                             "RGB H&E input is read as hematoxylin density (nuclei bright) unless --channel is given")
    parser.add_argument("--threshold", default="auto",
                        help="auto (default: the lower of Otsu's on the log scores and 0.3 x the typical nucleus's "
                             "score, with a contrast floor raised when the contrasts fall in two classes), "
                             "otsu (Otsu's on the log scores), reference (a tenth of the 90th percentile "
                             "of the scores of the maxima above the noise; better on fluorescence, worse on H&E), "
                             "none, or a score value")
    parser.add_argument("--min-contrast", type=float, default=None, metavar="K",
                        help="a nucleus must stand out from the image noise by K standard deviations "
                             "(default 3; 0 with --threshold none, which then writes every local maximum)")
    parser.add_argument("--blur", type=float, default=None,
                        help="Gaussian pre-blur sigma in the units of the spacing (default: 2 pixels)")
    parser.add_argument("--stains", choices=("fixed", "auto"), default="fixed",
                        help="for RGB H&E input: Ruifrok's fixed stain vectors (default) or vectors estimated "
                             "from the image (Macenko)")
    parser.add_argument("--tissue", choices=("auto", "none"), default="auto",
                        help="for RGB H&E input detected block by block: glass (a tissue mask from the "
                             "pyramid's smallest level, else every 32nd pixel) reads as 0 and its blocks are "
                             "skipped (default), or none")
    parser.add_argument("--features", default=None, metavar="MODEL|learn|learn-map",
                        help="ConvRBM .npz from 'ivote features fit': vote on its feature map instead of the blurred "
                             "image; 'learn': fit the recommended ConvRBM on each image first and vote on its "
                             "reconstruction; 'learn-map': the same model, on its hidden map most correlated with the "
                             "image (H&E; see docs/features.md)")
    parser.add_argument("--backend", choices=("auto", "numpy", "numba", "cupy"), default="auto",
                        help="array backend (default: GPU when available, else the compiled CPU kernels)")
    add_input_options(parser)
    outputs = parser.add_mutually_exclusive_group(required=True)
    outputs.add_argument("--out", default=None, help="output CSV (or .parquet with --format parquet)")
    outputs.add_argument("--out-dir", default=None, metavar="DIR",
                        help="for a pattern of files: one points table per file in DIR and DIR/summary.csv "
                             "(file, count, seconds); the files run as tasks of the Dask engine (--scheduler)")
    parser.add_argument("--format", choices=("csv", "parquet", "geojson"), default=None,
                        help="points table format: csv, parquet (needs pyarrow) or geojson (QuPath point "
                             "detections, docs/qupath-fiji.md) (default: from --out's suffix)")
    from ..distributed._options import add_engine_options

    large = parser.add_argument_group("large images and batches (block by block on Dask; see docs/scale.md)")
    add_engine_options(
        large,
        chunks_help="voxels each block owns, one number or one per axis (default: the largest blocks that fit "
                    "--memory-limit); any of these four options detects the image block by block, read lazily "
                    "(OME-Zarr, TIFF), with the in-memory result",
        memory_help="memory one block's detection may use: GPU memory per GPU (enforced), host memory on the CPU, "
                    "e.g. 8GB (default: three quarters of the GPU's memory, 2 GiB on the CPU)")
    parser.set_defaults(func=_cmd_detect)

def demo(sample_2d, sample_3d, out_dir) -> list[str]:
    """Detect on the demo samples; write ``detect_<sample>.csv``; one line each."""
    from ..io import write_points_csv
    from ..metrics import match_points
    from ._voting import iterative_voting

    lines = []
    for name, sample in (("sample_2d", sample_2d), ("sample_3d", sample_3d)):
        iterative_voting(sample.image[tuple(slice(0, 32) for _ in sample.image.shape)], radius=sample.radius,
                         spacing=sample.spacing)  # warm-up (kernel compilation)
        start = time.perf_counter()
        found = iterative_voting(sample.image, radius=sample.radius, spacing=sample.spacing)
        seconds = time.perf_counter() - start
        path = write_points_csv(Path(out_dir) / f"detect_{name}.csv", found.points, found.scores, spacing=sample.spacing)
        match = match_points(found.points, sample.centers, tolerance=sample.radius / 2, spacing=sample.spacing)
        lines.append(
            f"detect {name}: {len(found.points)} nuclei ({len(sample.centers)} true), "
            f"P {match.precision:.3f} R {match.recall:.3f} F1 {match.f1:.3f} within {sample.radius / 2:g} um, "
            f"{seconds:.2f} s on {found.backend} -> {path.name}"
        )
    return lines
