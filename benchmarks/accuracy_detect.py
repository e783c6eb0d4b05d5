"""Accuracy of iterative voting on every dataset of the evaluation data folder.

Two radius settings, in one run, on the same images:

* ``labels``: a per-image radius from the labels: the image's median nucleus
  radius (2D equivalent radius sqrt(area/pi), 3D equivalent-sphere radius)
  times the largest-over-typical rule of ``ivote.detect._radius``
  (``LARGEST_OVER_TYPICAL``: 1.5 in 2D, 1.25 in 3D);
* ``auto``: ``iterative_voting(radius="auto")``, the image alone.

(``--modes dataset`` adds the earlier rule: one radius per dataset from
meta.json; ``auto*F``, e.g. ``auto*0.95,auto*1.05``, votes with F times the
automatic radius, estimated by ``estimate_radius`` on the same signal (fixed
stain vectors): does a small change of radius change the result?) 3D datasets are measured in the working spacing
``s_i = max(r) / r_i`` from meta.json's per-axis radii (the median nucleus
becomes a sphere). A detection is correct within half the image's true median
radius (one-to-one optimal matching).

Per dataset and setting: precision, recall and F1 at the default threshold,
pooled over the images; the F1 with a per-image oracle threshold (each image's
best score threshold over the maxima that pass the default contrast test,
counts then pooled); the area under the pooled precision-recall curve (AP);
and scikit-image's ``blob_log`` given the same radius (sigma = typical radius /
sqrt(ndim) per axis), at its own default threshold and at Otsu's threshold of
its candidates' LoG responses, measured in the same run.

Usage: python benchmarks/accuracy_detect.py [--data DIR] [--backend auto|numpy|cupy|numba]
       [--datasets a,b] [--max-images N] [--every K] [--offset N] [--modes labels,auto] [--dump DIR]
       [--stains fixed|auto] [--voter-floor F] [--out benchmarks/results/detect_accuracy.md]

``--stains auto`` detects RGB (H&E) images on the hematoxylin density of
per-image (Macenko) stain vectors instead of Ruifrok's fixed ones (the
default, as ``iterative_voting``'s); blob_log gets the same signal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import tifffile
from scipy import ndimage as ndi

from ivote._backend import backend_name, default_xp
from ivote.detect import estimate_radius, hematoxylin_density, iterative_voting
from ivote.detect._radius import LARGEST_OVER_TYPICAL
from ivote.metrics import match_points, pooled_precision_recall

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("IVOTE_EVAL_DATA", REPO.parent / "shared" / "data"))
if not DEFAULT_DATA.exists():
    DEFAULT_DATA = Path("/work/shared/data")

DEFAULT_MIN_CONTRAST = 3.0
"""iterative_voting's default contrast test: the oracle searches score thresholds over the maxima passing it."""

RADIUS_FACTOR = LARGEST_OVER_TYPICAL
"""Voting radius / typical radius (one rule for every dataset, not tuned per
dataset; see ``ivote.detect._radius``)."""


def dataset_geometry(meta: dict):
    """(typical radius, spacing) in working units, from meta.json only (see module docstring)."""
    r = meta["radius_px"]
    if meta["ndim"] == 2:
        return float(r), None
    r = np.asarray(r, dtype=float)
    return float(r.max()), tuple(float(r.max() / ri) for ri in r)


def true_radius(labels, spacing) -> float:
    """Median equivalent radius (2D disc, 3D sphere) of the labelled nuclei, in spacing units; nan without nuclei."""
    sizes = np.bincount(np.asarray(labels).ravel())[1:]
    sizes = sizes[sizes > 0] * float(np.prod(spacing or (1.0,) * labels.ndim))
    if len(sizes) == 0:
        return float("nan")
    radii = np.sqrt(sizes / np.pi) if labels.ndim == 2 else np.cbrt(3 * sizes / (4 * np.pi))
    return float(np.median(radii))


def image_ids(folder: Path):
    return [line.split(",")[0] for line in (folder / "ids.csv").read_text().splitlines()[1:] if line.strip()]


def load_dataset(folder: Path, max_images=None, every=1, offset=0):
    for image_id in image_ids(folder)[offset:][::every][:max_images]:
        image = tifffile.imread(folder / "images" / f"{image_id}.tif")
        ndim = 3 if image.ndim == 3 and image.shape[-1] not in (3, 4) else 2
        with warnings.catch_warnings():  # an image without nuclei has a header-only centres file
            warnings.simplefilter("ignore", UserWarning)
            centers = np.loadtxt(folder / "centers" / f"{image_id}.csv", delimiter=",", skiprows=1, ndmin=2)
        centers = centers.reshape(-1, ndim)
        yield image_id, image, centers


def blob_log_input(image, meta, stains=None):
    """Grey image in [0, 1] with bright nuclei, the same signal we detect on."""
    if meta["channels"] == 3:
        grey = hematoxylin_density(image, stains=stains)
    else:
        grey = image.astype(np.float64)
        if meta["polarity"] == "dark":
            grey = -grey
    grey = grey - grey.min()
    return grey / max(grey.max(), 1e-12)


def run_blob_log(image, meta, typical, spacing, stains=None):
    """blob_log at one sigma: (default-threshold points, Otsu-threshold points, every candidate, their responses)."""
    from skimage.feature import blob_log
    from skimage.filters import threshold_otsu

    ndim = meta["ndim"]
    spacing = spacing or (1.0,) * ndim
    sigma = tuple(typical / np.sqrt(ndim) / s for s in spacing)
    grey = blob_log_input(image, meta, stains)
    default = blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1)[:, :ndim]
    every = blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1, threshold=1e-6)[:, :ndim]
    response = -ndi.gaussian_laplace(grey, sigma) * float(np.mean(sigma)) ** 2
    scores = response[tuple(np.round(every).astype(int).T)] if len(every) else np.zeros(0)
    otsu = every[scores >= threshold_otsu(scores)] if len(np.unique(scores)) > 1 else every
    return default, otsu, every, scores


def radius_of_mode(mode, image, typical_true, dataset_radius, ndim, spacing, polarity, backend):
    """The voting radius of a radius setting (module docstring): a number, or 'auto'."""
    if mode.startswith("auto*"):
        estimate = estimate_radius(image, spacing=spacing, polarity=polarity, backend=backend)
        return float(mode[len("auto*"):]) * estimate
    return {"labels": RADIUS_FACTOR[ndim] * typical_true, "auto": "auto",
            "dataset": RADIUS_FACTOR[ndim] * dataset_radius}[mode]


def oracle_match(points, scores, centers, tol, spacing, max_thresholds=100):
    """The match at the score threshold that maximises this image's F1."""
    best = match_points(points[:0], centers, tolerance=tol, spacing=spacing)
    if len(points) == 0:
        return best
    thresholds = np.unique(scores)
    if len(thresholds) > max_thresholds:
        thresholds = np.unique(np.quantile(scores, np.linspace(0, 1, max_thresholds)))
    for t in thresholds:
        m = match_points(points[scores >= t], centers, tolerance=tol, spacing=spacing)
        if m.f1 > best.f1:
            best = m
    return best


def add_scores(tally, found, centers, tol, spacing) -> None:
    """Pool one image's detections into ``tally`` (``.default``, ``.oracle``: matches or None;
    ``.curve``: a list): the default-threshold match, the oracle-threshold match over every
    maximum that passes the default contrast test, and those maxima for the PR curve."""
    match = match_points(found.points, centers, tolerance=tol, spacing=spacing)
    tally.default = match if tally.default is None else tally.default + match
    # every local maximum that passes the default contrast test (threshold="auto" may raise the floor)
    every = found.with_threshold(None, min_contrast=DEFAULT_MIN_CONTRAST)
    oracle = oracle_match(every.points, every.scores, centers, tol, spacing)
    tally.oracle = oracle if tally.oracle is None else tally.oracle + oracle
    tally.curve.append((every.points, every.scores, centers, spacing, tol))


def vote_features(found, radius_px):
    """Per-candidate shape of the vote field at the maximum: the mean vote of
    the 3^ndim box and of the box of half-width radius/4, relative to the peak."""
    votes = np.asarray(found.vote_field, dtype=np.float64)
    index = tuple(found.candidates.astype(int).T)
    peak = np.maximum(votes[index], 1e-12)
    near = ndi.uniform_filter(votes, 3, mode="constant")[index] / peak
    size = tuple(max(3, 2 * int(round(r / 4)) + 1) for r in radius_px)
    wide = ndi.uniform_filter(votes, size, mode="constant")[index] / peak
    return near, wide


class Tally:
    """Pooled counts and curves of one dataset and one setting."""

    def __init__(self):
        self.default = self.oracle = self.blob_default = self.blob_otsu = None
        self.curve, self.blob_curve, self.radii, self.seconds, self.n = [], [], [], 0.0, 0

    @staticmethod
    def _add(total, m):
        return m if total is None else total + m


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy", "numba"])
    parser.add_argument("--datasets", default=None, help="comma-separated subset")
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--every", type=int, default=1, help="every k-th image of each dataset (a subsample)")
    parser.add_argument("--offset", type=int, default=0, help="skip the first N images of each dataset (to resume a dump)")
    parser.add_argument("--modes", default="labels,auto", help="radius settings: labels, auto, dataset, auto*F")
    parser.add_argument("--no-peer", action="store_true", help="skip blob_log")
    parser.add_argument("--dump", default=None, help="write each image's candidates (npz) here, for threshold studies")
    parser.add_argument("--stains", default="fixed", choices=["fixed", "auto"],
                        help="H&E stain vectors: Ruifrok's fixed ones (the default) or per-image Macenko")
    parser.add_argument("--out", default=None, help="also write the table (markdown) here")
    parser.add_argument("--voter-floor", type=float, default=None,
                        help="vote with this floor instead of VOTER_FLOOR (e.g. 0.03125; see benchmarks/studies/voter_floor.py)")
    args = parser.parse_args(argv)
    if args.voter_floor is not None:
        if not 0 < args.voter_floor <= 1:
            parser.error(f"--voter-floor must be in (0, 1]; got {args.voter_floor:g}")
        from ivote.detect import _plan

        _plan.VOTER_FLOOR = args.voter_floor
        _plan._make_plan.cache_clear()
    data = Path(args.data)
    folders = sorted(p.parent for p in data.glob("*/meta.json"))
    if args.datasets:
        wanted = set(args.datasets.split(","))
        folders = [f for f in folders if f.name in wanted]
    if not folders:
        print(f"no datasets under {data}", file=sys.stderr)
        return 1
    modes = args.modes.split(",")
    backend = args.backend
    stains = None if args.stains == "fixed" else "auto"
    device = backend_name(default_xp()) if backend == "auto" else backend
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Detection accuracy ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Device/backend: {device}; iterative_voting defaults except radius/spacing/polarity; "
        f"tolerance = half the image's true median radius; {args.stains} stain vectors for RGB; "
        f"every {args.every} image(s)"
        + (f", voter floor {args.voter_floor:g}" if args.voter_floor is not None else "")
        + (f", at most {args.max_images} per dataset" if args.max_images else "") + ".",
        "",
        "| dataset | radius | images | nuclei | median radius | ours P | ours R | ours F1 | oracle F1 | ours AP "
        "| blob_log F1 (default) | blob_log F1 (Otsu) | blob_log AP | ours s/img |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        dataset_radius, spacing = dataset_geometry(meta)
        ndim = meta["ndim"]
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        tallies = {mode: Tally() for mode in modes}
        n_true = 0
        for image_id, image, centers in load_dataset(folder, args.max_images, args.every, args.offset):
            labels_path = folder / "labels" / f"{image_id}.tif"
            typical_true = true_radius(tifffile.imread(labels_path), spacing) if labels_path.exists() else np.nan
            if not np.isfinite(typical_true):  # no nucleus: the dataset's radius sets the tolerance
                typical_true = dataset_radius
            tol = typical_true / 2
            n_true += len(centers)
            for mode in modes:
                tally = tallies[mode]
                radius = radius_of_mode(mode, image, typical_true, dataset_radius, ndim, spacing, polarity, backend)
                t0 = time.perf_counter()
                found = iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity, backend=backend,
                                         return_votes=args.dump is not None,
                                         stains=stains if meta["channels"] == 3 else None)
                tally.seconds += time.perf_counter() - t0
                tally.n += 1
                tally.radii.append(found.radius)
                add_scores(tally, found, centers, tol, spacing)
                if args.dump:
                    near, wide = vote_features(found, [found.radius / s for s in (spacing or (1.0,) * ndim)])
                    np.savez_compressed(Path(args.dump) / f"{folder.name}__{image_id}__{mode}.npz", candidates=found.candidates,
                             vote_field=np.asarray(found.vote_field, dtype=np.float32),
                             scores=found.candidate_scores, contrasts=found.candidate_contrasts, near=near, wide=wide,
                             centers=centers, tolerance=tol, radius=found.radius, spacing=np.asarray(spacing or (1.0,) * ndim),
                             threshold=found.threshold, typical_true=typical_true)
                if not args.no_peer:
                    typical = found.radius / RADIUS_FACTOR[ndim]
                    default, otsu, peer_every, peer_scores = run_blob_log(image, meta, typical, spacing, stains)
                    tally.blob_default = tally._add(tally.blob_default,
                                                    match_points(default, centers, tolerance=tol, spacing=spacing))
                    tally.blob_otsu = tally._add(tally.blob_otsu, match_points(otsu, centers, tolerance=tol, spacing=spacing))
                    tally.blob_curve.append((peer_every, peer_scores, centers, spacing, tol))
        for mode in modes:
            tally = tallies[mode]
            if tally.n == 0:
                continue
            ap = _pooled_ap(tally.curve)
            row = [folder.name, mode, str(tally.n), str(n_true), f"{np.median(tally.radii):.2f}",
                   f"{tally.default.precision:.3f}", f"{tally.default.recall:.3f}", f"**{tally.default.f1:.3f}**",
                   f"{tally.oracle.f1:.3f}", f"{ap:.3f}"]
            if tally.blob_default is not None:
                row += [f"{tally.blob_default.f1:.3f}", f"{tally.blob_otsu.f1:.3f}", f"{_pooled_ap(tally.blob_curve):.3f}"]
            else:
                row += ["-"] * 3
            row.append(f"{tally.seconds / tally.n:.3f}")
            line = "| " + " | ".join(row) + " |"
            lines.append(line)
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def _pooled_ap(curve) -> float:
    """AP of the pooled curve; tolerances differ per image, so points are scaled to tolerance 1."""
    scaled = [(points, scores, centers, tuple(s / tol for s in (spacing or (1.0,) * centers.shape[1])))
              for points, scores, centers, spacing, tol in curve]
    return pooled_precision_recall(scaled, tolerance=1.0, max_thresholds=100).area


if __name__ == "__main__":
    sys.exit(main())
