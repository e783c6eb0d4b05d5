"""Automatic radius against the labels, per image, and the estimate's time against blob_log.

Truth per image, from its labels: 2D the median equivalent radius sqrt(area / pi),
3D the median equivalent-sphere radius (3 V / 4 pi)^(1/3), in the units of the
spacing the detection benchmark uses (2D: pixels; 3D: the working spacing
max(r) / r_i of ``accuracy_detect.dataset_geometry``, from meta.json). The
estimator sees only the image, that spacing and the dataset's polarity.
Two ratios: ``typical_radius`` / that median (the blobs' equivalent size), and
``estimate_radius`` (the voting radius ``radius="auto"`` uses) / the labels'
voting radius of ``accuracy_detect.py`` (``LARGEST_OVER_TYPICAL`` x the median:
1.5 in 2D, 1.25 in 3D), the one detection F1 follows.

``--timing``: the estimate on synthetic nuclei of 1024^2 and 256^3 pixels
against scikit-image's ``blob_log`` over the same scales (the full-resolution
scale space; its default threshold), CPU time (``time.process_time``) and wall time, after a warm-up.

Usage: python benchmarks/accuracy_radius.py [--data DIR] [--datasets a,b] [--max-images N] [--out FILE] [--timing]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_detect import DEFAULT_DATA, dataset_geometry, load_dataset, true_radius  # noqa: E402

from ivote._backend import backend_name, default_xp  # noqa: E402
from ivote.detect import estimate_radius, typical_radius  # noqa: E402
from ivote.detect._radius import LARGEST_OVER_TYPICAL  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--datasets", default=None)
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--timing", action="store_true", help="only time the estimate against blob_log")
    args = parser.parse_args(argv)
    if args.timing:
        return timing(args.out)
    folders = sorted(p.parent for p in Path(args.data).glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    lines = [f"# Automatic radius ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{backend_name(default_xp())})", "",
             "| dataset | image | true median radius | typical | typical / truth | voting radius: labels | auto "
             "| auto / labels | s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    summary = []
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        _, spacing = dataset_geometry(meta)
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        ratios, voting_ratios = [], []
        for image_id, image, _ in load_dataset(folder, args.max_images):
            labels = tifffile.imread(folder / "labels" / f"{image_id}.tif")
            truth = true_radius(labels, spacing)
            if not np.isfinite(truth):
                continue  # no nucleus: nothing to compare with
            typical = typical_radius(image, spacing=spacing, polarity=polarity)
            start = time.perf_counter()
            voting = estimate_radius(image, spacing=spacing, polarity=polarity)
            seconds = time.perf_counter() - start
            labels_voting = LARGEST_OVER_TYPICAL[meta["ndim"]] * truth
            ratios.append(typical / truth)
            voting_ratios.append(voting / labels_voting)
            line = (f"| {folder.name} | {image_id} | {truth:.2f} | {typical:.2f} | {typical / truth:.2f} | {labels_voting:.2f} "
                    f"| {voting:.2f} | {voting / labels_voting:.2f} | {seconds:.2f} |")
            lines.append(line)
            print(line, flush=True)
        ratios, voting_ratios = np.asarray(ratios), np.asarray(voting_ratios)
        summary.append(f"| {folder.name} | {len(ratios)} | {np.median(ratios):.2f} | {np.median(voting_ratios):.2f} "
                       f"| {voting_ratios.min():.2f} | {voting_ratios.max():.2f} "
                       f"| {np.mean(np.abs(voting_ratios - 1) <= 0.10):.2f} | {np.mean(np.abs(voting_ratios - 1) <= 0.20):.2f} |")
    lines += ["", "| dataset | images | typical / truth (median) | auto / labels voting radius: median | min | max "
              "| within 10% | within 20% |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += summary
    print("\n".join(lines[-len(summary) - 3:]), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def timing(out=None) -> int:
    """The estimate against blob_log over the same scales, synthetic nuclei, 2D 1024^2 and 3D 256^3."""
    import math

    from skimage.feature import blob_log

    from ivote.data import synthetic_nuclei
    from ivote.detect._radius import _MAX_PIXELS, _MIN_RADIUS_PIXELS, _central_crop, _radii

    lines = [f"# Automatic radius: time ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{backend_name(default_xp())})", "",
             "| image | estimate radius | estimate CPU s | estimate wall s | blob_log (same scales) CPU s | wall s | CPU ratio |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for shape, radius in (((1024, 1024), 8.0), ((256, 256, 256), 6.0)):
        image = synthetic_nuclei(shape, radius=radius, seed=0).image
        estimate_radius(image[tuple(slice(0, 64) for _ in shape)])  # warm-up (imports, caches)
        cpu, wall = time.process_time(), time.perf_counter()
        estimate = estimate_radius(image)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        # the peer sees what the estimate sees: the same crop, the same scales at full resolution
        crop = _central_crop(image.astype(np.float32), _MAX_PIXELS)
        radii = _radii(_MIN_RADIUS_PIXELS, min(crop.shape) / 4)
        peer_cpu, peer_wall = time.process_time(), time.perf_counter()
        blob_log(crop / crop.max(), min_sigma=radii[0] / math.sqrt(len(shape)), max_sigma=radii[-1] / math.sqrt(len(shape)),
                 num_sigma=len(radii))
        peer_cpu, peer_wall = time.process_time() - peer_cpu, time.perf_counter() - peer_wall
        line = (f"| {'x'.join(map(str, shape))} (radius {radius:g}) | {estimate:.2f} | {cpu:.2f} | {wall:.2f} "
                f"| {peer_cpu:.2f} | {peer_wall:.2f} | {peer_cpu / cpu:.1f}x |")
        lines.append(line)
        print(line, flush=True)
    if out:
        Path(out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
