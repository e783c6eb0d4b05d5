"""``ivote learn IMAGE [IMAGE ...] --points CORRECTED.csv [--points ...] --radius R [--spacing ...]
[--polarity bright|dark] [--detector PREVIOUS.json] --out detector.json``.

One ``--points`` table per image (our points CSV, as ``ivote detect`` writes it, or napari's),
holding the corrected nucleus centres of that image. The detector is then applied with
``ivote detect IMAGE --detector detector.json``.
"""

from __future__ import annotations

import math

__all__ = ["register"]


def _cmd_learn(args) -> int:
    from .._files import command_spacing, read_for_detection
    from ..detect._cli import _radius
    from ..io import check_output_path, read_points_csv
    from ._detector import load_detector
    from ._learn import learn_detector

    if len(args.points) != len(args.images):
        raise ValueError(f"give one --points table per image: {len(args.images)} image(s), "
                         f"{len(args.points)} --points")
    check_output_path(args.out, (".json",), inputs=tuple(args.images) + tuple(args.points))
    radius = _radius(args.radius)
    if radius == "auto":
        raise ValueError("--radius must be a number for ivote learn (the detector is applied at it)")
    images, points, spacing = [], [], None
    for image_path, points_path in zip(args.images, args.points):
        image, found = read_for_detection(image_path, axes=args.axes, channel=args.channel)
        if "T" in found.axes:
            raise ValueError(f"{image_path} is a time-lapse; learn on single frames (save one frame as an image)")
        table = read_points_csv(points_path)
        this = command_spacing(found, args.spacing, command="ivote learn", fallback=table.spacing)
        if spacing is not None and tuple(this or ()) != tuple(spacing or ()):
            raise ValueError(f"{image_path} has spacing {this}, the first image {spacing}: give --spacing")
        spacing = this
        images.append(image)
        points.append(table.points)
    previous = load_detector(args.detector) if args.detector else None
    detector = learn_detector(images, points, radius=radius, spacing=spacing, polarity=args.polarity,
                              detector=previous, backend=args.backend)
    detector.save(args.out)
    n_pos = int(detector.labels.sum())
    print(f"learned from {detector.n_images} image(s): {n_pos} nuclei and {detector.n_samples - n_pos} other "
          f"candidates, {detector.n_unmatched_points} corrected point(s) with no candidate within "
          f"{detector.tolerance:.3g}{_search(detector)}; {_decision(detector)} -> {args.out}")
    return 0


def _search(detector) -> str:
    if detector.search_floor is None:
        return ""
    return (f" (after widening the candidates down to {math.exp(detector.search_floor):.2g} times the default "
            "threshold's score, where corrected points had none)")


def _decision(detector) -> str:
    learned, default = detector.training_f1
    if detector.decision == "default":
        return (f"the default threshold's points kept (learned F1 {learned:.3f} on the training images, "
                f"default {default:.3f}: no gain)")
    return f"probability threshold {detector.threshold:.3g} (F1 on the training images {learned:.3f}, default {default:.3f})"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "learn",
        help="learn a detector from corrected points; apply it with 'ivote detect --detector'",
        description="Learn which maxima of the vote field are nuclei from corrected nucleus centres "
                    "(one points table per image) and save the detector as JSON.",
    )
    parser.add_argument("images", metavar="IMAGE", nargs="+", help="images whose points were corrected")
    parser.add_argument("--points", action="append", required=True, metavar="CSV",
                        help="corrected centres of one image (ours or napari's points CSV); once per image, in order")
    parser.add_argument("--radius", required=True, help="voting radius, as for ivote detect (a number)")
    parser.add_argument("--spacing", type=float, nargs="+", metavar="S",
                        help="pixel size per axis: Z Y X or Y X (default: from the file, else 1)")
    parser.add_argument("--polarity", choices=("bright", "dark"), default="bright",
                        help="bright nuclei on dark (fluorescence, default) or dark on bright; RGB is read as H&E")
    parser.add_argument("--axes", default=None, help="the file's axes where its metadata does not name them")
    parser.add_argument("--channel", type=int, default=None, help="the nuclear stain's channel")
    parser.add_argument("--detector", default=None, metavar="JSON",
                        help="a detector to add these corrections to (its training samples are kept)")
    parser.add_argument("--backend", choices=("auto", "numpy", "numba", "cupy"), default="auto",
                        help="where the images are detected and their candidates described (default: auto)")
    parser.add_argument("--out", required=True, help="the detector file to write (.json)")
    parser.set_defaults(func=_cmd_learn)
