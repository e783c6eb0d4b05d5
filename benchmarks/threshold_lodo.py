"""The default threshold rule's fractions, chosen leave-one-dataset-out on the evaluation data.

:func:`ivote.detect.auto_threshold` has two fractions chosen from data: the score threshold is at
most ``_AUTO_TYPICAL_FRACTION`` x the typical nucleus's score, and on textured images
``_AUTO_TEXTURE_FRACTION`` x it. For each dataset, the pair that gives the best mean F1 over the
*other* datasets (pooled per dataset) is chosen from a grid and measured on the held-out one;
the table gives those held-out F1s, beside the current default's and the per-image oracle's
(the best score threshold of each image over the maxima passing the contrast test, counts pooled).

Every image is detected once (radius from its labels, as ``accuracy_detect.py``'s ``labels``
setting; every candidate kept), then the rules are applied to the candidates.

Usage: python benchmarks/threshold_lodo.py [--data DIR] [--max-images N] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_detect import (DEFAULT_DATA, DEFAULT_MIN_CONTRAST, RADIUS_FACTOR, dataset_geometry,  # noqa: E402
                             load_dataset, oracle_match, true_radius)

from ivote.detect import _thresholds, iterative_voting  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

TYPICAL = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
TEXTURE = (0.3, 0.35, 0.4, 0.45, 0.5)


def candidates_of(folder: Path, max_images):
    meta = json.loads((folder / "meta.json").read_text())
    dataset_radius, spacing = dataset_geometry(meta)
    polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
    out = []
    for image_id, image, centers in load_dataset(folder, max_images):
        labels_path = folder / "labels" / f"{image_id}.tif"
        typical = true_radius(tifffile.imread(labels_path), spacing) if labels_path.exists() else np.nan
        typical = typical if np.isfinite(typical) else dataset_radius
        found = iterative_voting(image, radius=RADIUS_FACTOR[meta["ndim"]] * typical, spacing=spacing,
                                 polarity=polarity, threshold=None, min_contrast=0.0)
        out.append((found, centers, typical / 2, spacing))
    return out


def pooled_f1(images, typical, texture) -> float:
    _thresholds._AUTO_TYPICAL_FRACTION, _thresholds._AUTO_TEXTURE_FRACTION = typical, texture
    total = None
    for found, centers, tol, spacing in images:
        kept = found.with_threshold("auto", DEFAULT_MIN_CONTRAST)
        m = match_points(kept.points, centers, tolerance=tol, spacing=spacing)
        total = m if total is None else total + m
    return total.f1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in Path(args.data).glob("*/meta.json"))
    if not folders:
        print(f"no datasets under {args.data}", file=sys.stderr)
        return 1
    current = (_thresholds._AUTO_TYPICAL_FRACTION, _thresholds._AUTO_TEXTURE_FRACTION)
    data = {f.name: candidates_of(f, args.max_images) for f in folders}
    grid = list(itertools.product(TYPICAL, TEXTURE))
    scores = {name: {pair: pooled_f1(images, *pair) for pair in grid} for name, images in data.items()}
    lines = [f"# Default threshold, leave one dataset out ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
             "", "`python benchmarks/threshold_lodo.py" + (" " + " ".join(argv or sys.argv[1:])).rstrip() + "`; "
             f"grid: typical fraction {TYPICAL}, texture fraction {TEXTURE}; current default {current}. "
             "Pooled F1 per dataset.", "",
             "| held out | images | chosen on the others (typical, texture) | held-out F1 | current default F1 "
             "| oracle F1 | held-out - oracle |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, images in data.items():
        others = [n for n in data if n != name]
        chosen = max(grid, key=lambda pair: (np.mean([scores[n][pair] for n in others]), pair == current))
        oracle = None
        for found, centers, tol, spacing in images:
            every = found.with_threshold(None, min_contrast=DEFAULT_MIN_CONTRAST)
            m = oracle_match(every.points, every.scores, centers, tol, spacing)
            oracle = m if oracle is None else oracle + m
        held = scores[name][chosen]
        lines.append(f"| {name} | {len(images)} | {chosen} | {held:.3f} | {scores[name][current]:.3f} | "
                     f"{oracle.f1:.3f} | {held - oracle.f1:+.3f} |")
        print(lines[-1], flush=True)
    best_all = max(grid, key=lambda pair: (np.mean([scores[n][pair] for n in data]), pair == current))
    lines += ["", f"Chosen on all datasets: {best_all} (mean F1 {np.mean([scores[n][best_all] for n in data]):.4f}; "
              f"current {current}: {np.mean([scores[n][current] for n in data]):.4f})."]
    print("\n".join(lines))
    _thresholds._AUTO_TYPICAL_FRACTION, _thresholds._AUTO_TEXTURE_FRACTION = current
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
