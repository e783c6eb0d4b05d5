"""``ivote segment INPUT --points points.csv --radius R [--spacing Z Y X | Y X]
[--polarity bright|dark] [--iterations N] --out labels.tif``.

Seeds are the points of a CSV written by ``ivote detect`` (pixel coordinates);
the output is an int32 label TIFF (label k + 1 for seed k), written atomically.
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["demo", "register"]


def _grey(image, polarity):
    """RGB(A) H&E input: the hematoxylin density, nuclei bright."""
    if image.ndim == 3 and image.shape[-1] in (3, 4):
        from ..detect import hematoxylin_density

        return hematoxylin_density(image), "bright"
    return image, polarity


def _cmd_segment(args) -> int:
    import numpy as np
    import tifffile

    from ..io import check_output_path, read_image, read_points_csv, write_atomic
    from ._segment import segment_nuclei

    check_output_path(args.out, (".tif", ".tiff"))
    image, file_spacing = read_image(args.input)
    image, polarity = _grey(image, args.polarity)
    table = read_points_csv(args.points)
    spacing = tuple(args.spacing) if args.spacing else (file_spacing or table.spacing)
    if spacing is not None and len(spacing) != image.ndim:
        if args.spacing:
            raise ValueError(f"--spacing needs {image.ndim} values for this {image.ndim}D image; got {len(spacing)}")
        spacing = None
    points = np.asarray(table.points, dtype=float)
    if points.size == 0:
        points = np.zeros((0, image.ndim))
    if points.ndim != 2 or points.shape[1] != image.ndim:
        raise ValueError(f"--points holds {points.shape[-1]}D points but the image is {image.ndim}D")
    start = time.perf_counter()
    labels = segment_nuclei(image, points, radius=args.radius, spacing=spacing, polarity=polarity,
                            iterations=args.iterations, backend=args.backend)
    labels = labels.get() if hasattr(labels, "get") else labels
    seconds = time.perf_counter() - start
    meta = {"spacing": list(spacing)} if spacing else {}
    out = write_atomic(args.out, lambda tmp: tifffile.imwrite(tmp, labels.astype(np.int32), metadata=meta or None))
    n_objects = len(np.unique(labels)) - 1
    print(f"{n_objects} objects from {len(points)} seeds in {seconds:.2f} s -> {out}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "segment",
        help="outline nuclei by interacting level sets seeded at points; write a label TIFF",
        description="Segment nuclei by many interacting level sets (one per seed, GPU when available).",
    )
    parser.add_argument("input", metavar="INPUT", help="TIFF or PNG image: 2D, 2D RGB (H&E) or 3D (Z, Y, X)")
    parser.add_argument("--points", required=True, help="seed points CSV, as written by 'ivote detect'")
    parser.add_argument("--radius", type=float, required=True,
                        help="largest nucleus radius, in the units of the spacing (pixels without one)")
    parser.add_argument("--spacing", type=float, nargs="+", metavar="S",
                        help="pixel size per axis: Z Y X or Y X (default: from the image's metadata, else "
                             "the '# scale' line of the points CSV, else 1)")
    parser.add_argument("--polarity", choices=("bright", "dark"), default="bright",
                        help="bright nuclei on dark or dark on bright (default: bright; RGB input: hematoxylin)")
    parser.add_argument("--iterations", type=int, default=300, help="most iterations (default 300)")
    parser.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto",
                        help="array backend (default: GPU when available)")
    parser.add_argument("--out", required=True, help="output label TIFF (int32)")
    parser.set_defaults(func=_cmd_segment)


def demo(sample_2d, sample_3d, out_dir) -> list[str]:
    """Segment both samples seeded by the detect stage's points (``detect_<sample>.csv`` in
    ``out_dir``, as a user would chain ``ivote detect`` and ``ivote segment``), or by the true
    centres when there are none; write ``segment_<sample>.tif``; report F1 at IoU 0.5 and mean
    matched IoU against the true labels."""
    import numpy as np
    import tifffile

    from ..io import read_points_csv, write_atomic
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
        path = Path(out_dir) / f"segment_{name}.tif"
        write_atomic(path, lambda tmp: tifffile.imwrite(tmp, labels.astype(np.int32)))
        lines.append(
            f"segment {name} seeded by {len(seeds)} {seed_name}: {match.n_predicted} objects "
            f"({match.n_true} true), F1@0.5 {match.f1:.3f}, mean IoU {match.mean_matched_iou:.3f}, "
            f"{seconds:.2f} s -> {path.name}"
        )
    return lines
