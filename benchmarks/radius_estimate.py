"""The error of ``radius="auto"`` on the evaluation data, per image, and what its bounds changed.

For each image: the radius ``iterative_voting(radius="auto")`` takes
(``ivote.detect._radius.auto_radius``: the estimate with its support rule, bounded by a
quarter of the smallest extent and by the memory limit on the compiled CPU path), the plain
area-weighted estimate without the support rule (``--before``'s column), and two truths: the
image's own labels' voting radius (``LARGEST_OVER_TYPICAL`` x their median equivalent radius,
as ``accuracy_radius.py``) and the dataset's (the same factor x meta.json's ``radius_px``).
Prints a row per image and, per dataset, the quartiles of auto / labels and the share of
images within a factor 1.5 of it. Geometry and truth as ``accuracy_detect.py``.

Usage: python benchmarks/radius_estimate.py [--data DIR] [--datasets a,b] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_detect import DEFAULT_DATA, dataset_geometry, load_dataset, true_radius  # noqa: E402

from ivote.detect._radius import (LARGEST_OVER_TYPICAL, VOTING_OVER_LONG_AXIS, _area_weighted_median,  # noqa: E402
                                  _grey_signal, _signal_blobs, auto_radius)


def plain_estimate(signal, spacing, sign, xp) -> float:
    """The area-weighted estimate without the support rule."""
    strengths, radii, axes = _signal_blobs(signal, spacing, sign, None, None, xp)
    return VOTING_OVER_LONG_AXIS * _area_weighted_median(strengths, radii, axes[:, 1], signal.ndim)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--datasets", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in Path(args.data).glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    lines = [f"# radius='auto' against the labels ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
             "", "| dataset | image | labels' voting radius | dataset's | plain estimate | auto | auto / labels "
             "| note |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    summary = []
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        typical, spacing = dataset_geometry(meta)
        factor = LARGEST_OVER_TYPICAL[meta["ndim"]]
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        ratios, plain_ratios, to_dataset = [], [], []
        for image_id, image, _ in load_dataset(folder):
            labels = tifffile.imread(folder / "labels" / f"{image_id}.tif")
            truth = factor * true_radius(labels, spacing)
            if not np.isfinite(truth):
                continue
            signal, sp, sign, xp = _grey_signal(image, spacing, polarity, None, "numpy")
            plain = plain_estimate(signal, sp, sign, xp)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                auto, note = auto_radius(signal, sp, sign, xp, "numba")
            ratios.append(auto / truth)
            plain_ratios.append(plain / truth)
            to_dataset.append(auto / (factor * typical))
            line = (f"| {folder.name} | {image_id} | {truth:.2f} | {factor * typical:.2f} | {plain:.2f} | {auto:.2f} "
                    f"| {auto / truth:.2f} | {note} |")
            lines.append(line)
            print(line, flush=True)
        r, p, d = np.asarray(ratios), np.asarray(plain_ratios), np.asarray(to_dataset)
        q = np.percentile(r, [0, 25, 50, 75, 100])
        summary.append(f"| {folder.name} | {len(r)} | {q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f} / {q[3]:.2f} / {q[4]:.2f} "
                       f"| {np.mean((r >= 2 / 3) & (r <= 1.5)):.2f} | {np.mean((p >= 2 / 3) & (p <= 1.5)):.2f} "
                       f"| {p.max():.2f} | {np.median(d):.2f} |")
    lines += ["", "| dataset | images | auto / labels: min / 25% / median / 75% / max | within 1.5x | plain: within 1.5x "
              "| plain: max | auto / dataset's (median) |", "| --- | --- | --- | --- | --- | --- | --- |"] + summary
    print("\n".join(lines[-len(summary) - 3:]), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
