"""Accuracy of the learned detector on every dataset of the evaluation data folder, in one run.

Per dataset, with the voting radius from each image's labels (as ``accuracy_detect.py``'s
``labels`` setting: the median nucleus radius times ``LARGEST_OVER_TYPICAL``), a detection
correct within half the image's true median radius:

* ``default``: ``iterative_voting``'s default threshold (``threshold="auto"``);
* ``learned 1`` / ``learned 3``: :func:`ivote.learn_detector` trained on the true centres of the
  first image / the first three images, applied to the others;
* ``twenty clicks``: trained on the first image's default detections with the 10
  highest-scoring false detections deleted and 10 missed nuclei added (nothing else corrected);
* ``oracle``: each test image's best score threshold over the maxima passing the default
  contrast test (counts pooled);
* ``blob_log`` / ``blob_log Otsu``: scikit-image's ``blob_log`` at one sigma from the same
  radius, at its default threshold and at Otsu's threshold of its candidates' responses
  (``accuracy_detect.run_blob_log``), measured in the same run.

Every column is measured on the same test images: the fourth image on. A dataset of one
image is split in two along x: training on the left half (``annotated`` mask), testing on
the detections and centres of the right half. F1, precision and recall are pooled over the
test images.

Usage: python benchmarks/accuracy_learn.py [--data DIR] [--datasets a,b] [--max-images N]
       [--backend numba|numpy] [--no-peer] [--cache DIR] [--out benchmarks/results/learn.md]
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
from accuracy_detect import (DEFAULT_DATA, DEFAULT_MIN_CONTRAST, RADIUS_FACTOR, dataset_geometry,  # noqa: E402
                             load_dataset, oracle_match, run_blob_log, true_radius)

from ivote.detect import iterative_voting  # noqa: E402
from ivote.learn import candidate_features, corrections_of, fit_detector  # noqa: E402
from ivote.learn._candidates import widen  # noqa: E402
from ivote.learn._learn import default_tolerance, one_floor  # noqa: E402
from ivote.detect._colour import reads_as_rgb  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

N_TRAIN = 3
CLICKS = 10  # deleted false detections, and as many added missed nuclei


class Image:
    """One image's detection (every candidate), features and truth."""

    def __init__(self, image_id, image, centers, meta, spacing, typical, backend):
        ndim = meta["ndim"]
        self.id, self.image, self.centers, self.spacing, self.ndim = image_id, image, centers, spacing, ndim
        self.polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        self.tol = typical / 2
        radius = RADIUS_FACTOR[ndim] * typical
        start = time.perf_counter()
        self.found = iterative_voting(image, radius=radius, spacing=spacing, polarity=self.polarity,
                                      threshold=None, return_votes=True, backend=backend)
        self.default = self.found.with_threshold("auto", DEFAULT_MIN_CONTRAST)
        self.detect_seconds = time.perf_counter() - start
        start = time.perf_counter()
        self.wide, original = widen(self.found)
        self.features = candidate_features(image, self.wide, polarity=self.polarity, original=original,
                                           backend=backend)
        self.feature_seconds = time.perf_counter() - start
        self._widened = {None: (self.wide, self.features)}
        self.region = None  # training mask (one-image datasets: the left half)
        self.test_keep = None  # x from which points and centres are tested

    def corrections(self, points, backend, search=True, floor=None):
        return corrections_of(self.image, self.found, points, polarity=self.polarity, annotated=self.region,
                              tolerance=self.tol, search=search, floor=floor, backend=backend)

    def candidates(self, floor, backend):
        """The widened candidates and their features down to a detector's search floor (cached)."""
        if floor not in self._widened:
            wide, original = widen(self.found, floor)
            self._widened[floor] = wide, candidate_features(self.image, wide, polarity=self.polarity,
                                                            original=original, backend=backend)
        return self._widened[floor]

    def tested(self, points):
        if self.test_keep is None:
            return points
        return points[points[:, -1] >= self.test_keep]

    def match(self, points):
        return match_points(self.tested(points), self.tested(self.centers), tolerance=self.tol, spacing=self.spacing)

    def twenty_clicks(self):
        """The default's points with its CLICKS best-scoring false detections deleted and CLICKS
        missed nuclei added."""
        points, scores = self.default.points, self.default.scores
        region = np.ones(len(points), bool) if self.test_keep is None else points[:, -1] < self.test_keep
        centers = self.centers if self.test_keep is None else self.centers[self.centers[:, -1] < self.test_keep]
        m = match_points(points, centers, tolerance=self.tol, spacing=self.spacing)
        false = np.ones(len(points), bool)
        false[m.pairs[:, 0]] = False
        false &= region
        delete = np.flatnonzero(false)[np.argsort(-scores[false], kind="stable")][:CLICKS]
        missed = np.ones(len(centers), bool)
        missed[m.pairs[:, 1]] = False
        add = centers[np.flatnonzero(missed)[:CLICKS]]
        keep = np.ones(len(points), bool)
        keep[delete] = False
        return np.concatenate([points[keep & region], add])


def learned_points(detector, img, backend):
    if detector is None:
        return img.default.points
    wide, features = img.candidates(detector.search_floor, backend)
    p = detector.probability(features)
    return wide.candidates[detector.select(wide.candidates, p, wide.spacing, features=features)]


def train(images, points_of, backend):
    """The detector learned from ``points_of(image)`` on ``images``, or None when nothing can be learned
    (every candidate of the training region is a nucleus): the default's points are counted then."""
    from ivote.errors import IvoteError

    first = images[0]
    corrections = [img.corrections(points_of(img), backend) for img in images]
    corrections = one_floor(corrections, lambda k, floor: images[k].corrections(points_of(images[k]), backend,
                                                                                search=False, floor=floor))
    try:
        return _fit(corrections, first)
    except IvoteError as exc:
        print(f"  {first.id}: {exc}", file=sys.stderr)
        return None


def _fit(corrections, first):
    return fit_detector(corrections, radius=first.found.radius, spacing=first.found.spacing,
                        polarity=first.polarity, ndim=first.ndim,
                        rgb=reads_as_rgb(np.shape(first.image)), tolerance=default_tolerance(first.found.radius,
                                                                                            first.ndim))


def _sum(matches):
    total = None
    for m in matches:
        total = m if total is None else total + m
    return total


def evaluate(folder: Path, args):
    meta = json.loads((folder / "meta.json").read_text())
    dataset_radius, spacing = dataset_geometry(meta)
    images = []
    for image_id, image, centers in load_dataset(folder, args.max_images):
        labels_path = folder / "labels" / f"{image_id}.tif"
        typical = true_radius(tifffile.imread(labels_path), spacing) if labels_path.exists() else np.nan
        if not np.isfinite(typical):
            typical = dataset_radius
        images.append(Image(image_id, image, centers, meta, spacing, typical, args.backend))
    if len(images) == 1:  # one image: train on the left half, test on the right
        img = images[0]
        half = img.found.vote_field.shape[-1] // 2
        mask = np.zeros(img.found.vote_field.shape, bool)
        mask[..., :half] = True
        img.region, img.test_keep = mask, float(half)
        train_one, train_three, test = [img], [img], [img]
    else:
        train_one, train_three, test = images[:1], images[:N_TRAIN], images[N_TRAIN:]
    start = time.perf_counter()
    one = train(train_one, lambda i: i.centers, args.backend)
    learn_seconds = time.perf_counter() - start
    three = train(train_three, lambda i: i.centers, args.backend)
    clicks = train(train_one, lambda i: i.twenty_clicks(), args.backend)
    rows = {
        "default": _sum(i.match(i.default.points) for i in test),
        "learned 1": _sum(i.match(learned_points(one, i, args.backend)) for i in test),
        "learned 3": _sum(i.match(learned_points(three, i, args.backend)) for i in test),
        "twenty clicks": _sum(i.match(learned_points(clicks, i, args.backend)) for i in test),
    }
    oracle = []
    for i in test:
        every = i.found.with_threshold(None, min_contrast=DEFAULT_MIN_CONTRAST)
        keep = np.ones(len(every.points), bool) if i.test_keep is None else every.points[:, -1] >= i.test_keep
        centers = i.tested(i.centers)
        oracle.append(oracle_match(every.points[keep], every.scores[keep], centers, i.tol, i.spacing))
    rows["oracle"] = _sum(oracle)
    if not args.no_peer:
        blob, blob_otsu = [], []
        for i in test:
            default, otsu, _, _ = run_blob_log(i.image, meta, i.found.radius / RADIUS_FACTOR[i.ndim], i.spacing)
            blob.append(i.match(default))
            blob_otsu.append(i.match(otsu))
        rows["blob_log"], rows["blob_log Otsu"] = _sum(blob), _sum(blob_otsu)
    timing = dict(detect=np.mean([i.detect_seconds for i in images]),
                  features=np.mean([i.feature_seconds for i in images]), learn=learn_seconds,
                  candidates=np.mean([len(i.found.candidates) for i in images]))
    return meta, len(test), sum(len(i.tested(i.centers)) for i in test), rows, timing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--datasets", default=None)
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--backend", default="auto", choices=["auto", "numpy", "numba"])
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in Path(args.data).glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    if not folders:
        print(f"no datasets under {args.data}", file=sys.stderr)
        return 1
    columns = ["default", "learned 1", "learned 3", "twenty clicks", "oracle", "blob_log", "blob_log Otsu"]
    lines = [f"# Learned detector accuracy ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             "`python benchmarks/accuracy_learn.py" + (" " + " ".join(argv or sys.argv[1:])).rstrip() + "`; "
             f"backend {args.backend}; F1 (precision / recall) pooled over the test images.", "",
             "| dataset | test images | nuclei | " + " | ".join(columns) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in columns) + " |"]
    print("\n".join(lines), flush=True)
    timings = []
    for folder in folders:
        meta, n_test, n_nuclei, rows, timing = evaluate(folder, args)
        cells = [f"{rows[c].f1:.3f} ({rows[c].precision:.2f} / {rows[c].recall:.2f})" if c in rows else "-"
                 for c in columns]
        line = f"| {folder.name} | {n_test} | {n_nuclei} | " + " | ".join(cells) + " |"
        lines.append(line)
        print(line, flush=True)
        timings.append((folder.name, timing))
    lines += ["", "Mean seconds per image (detection with every candidate and its vote field; candidate "
              "features) and for learning from the first image:", "",
              "| dataset | candidates | detect s | features s | learn s |", "| --- | --- | --- | --- | --- |"]
    for name, t in timings:
        lines.append(f"| {name} | {t['candidates']:.0f} | {t['detect']:.3f} | {t['features']:.4f} | {t['learn']:.3f} |")
    print("\n".join(lines[-len(timings) - 4:]), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
