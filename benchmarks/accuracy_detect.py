"""Accuracy of iterative voting on every dataset of the evaluation data folder.

For each dataset the radius comes from its ``meta.json`` and nothing else is
tuned. 2D: radius = radius_px, spacing 1. 3D datasets give per-axis semi-axes
``radius_px = [rz, ry, rx]`` (voxels); we use the working spacing
``s_i = max(r) / r_i`` and typical radius ``max(r)``, i.e. the voxel grid is
rescaled so that the median nucleus is a sphere, and distances (voting, maxima,
matching) are measured in those units. The voting radius is the typical radius
times ``RADIUS_FACTOR`` (1.5 in 2D, 1.25 in 3D; see there); the matching
tolerance is half the typical radius. A detection is correct within half the radius
(one-to-one optimal matching). We report precision, recall and F1 at the
default (Otsu) threshold, pooled over the images, and the area under the pooled
precision-recall curve of all local maxima that pass the default contrast test
(``min_contrast``: 3 noise sigmas), swept by score; next to scikit-image's ``blob_log``
with sigma = r / sqrt(ndim) per axis (its default threshold for P/R/F1, its
LoG response as score for the curve), measured in the same run.

Usage: python benchmarks/accuracy_detect.py [--data DIR] [--backend auto|numpy|cupy]
       [--datasets a,b] [--max-images N] [--out benchmarks/results/detect_accuracy.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import tifffile
from scipy import ndimage as ndi

from ivote._backend import backend_name, default_xp
from ivote.detect import hematoxylin_density, iterative_voting
from ivote.metrics import match_points, pooled_precision_recall

REPO = Path(__file__).resolve().parents[1]


RADIUS_FACTOR = {2: 1.5, 3: 1.25}
"""Voting radius / the dataset's typical radius. ``radius`` of iterative_voting is
the largest semi-axis of the larger nuclei; meta.json gives, in 2D, the median
equivalent radius sqrt(area/pi) (a 2:1 ellipse's semi-major axis is 1.41 times
it) and, in 3D, the median semi-axes, whose largest already is a semi-major
axis; both are then scaled for the spread of sizes (p95/p50 about 1.2-1.3). One
rule for every dataset; not tuned per dataset."""


def dataset_geometry(meta: dict):
    """(typical radius, spacing) in working units, from meta.json only (see module docstring)."""
    r = meta["radius_px"]
    if meta["ndim"] == 2:
        return float(r), None
    r = np.asarray(r, dtype=float)
    return float(r.max()), tuple(float(r.max() / ri) for ri in r)


def load_dataset(folder: Path, max_images=None):
    ids = [line.split(",")[0] for line in (folder / "ids.csv").read_text().splitlines()[1:] if line.strip()]
    for image_id in ids[:max_images]:
        image = tifffile.imread(folder / "images" / f"{image_id}.tif")
        ndim = 3 if image.ndim == 3 and image.shape[-1] not in (3, 4) else 2
        with warnings.catch_warnings():  # an image without nuclei has a header-only centres file
            warnings.simplefilter("ignore", UserWarning)
            centers = np.loadtxt(folder / "centers" / f"{image_id}.csv", delimiter=",", skiprows=1, ndmin=2)
        centers = centers.reshape(-1, ndim)
        yield image_id, image, centers


def blob_log_input(image, meta):
    """Grey image in [0, 1] with bright nuclei, the same signal we detect on."""
    if meta["channels"] == 3:
        grey = hematoxylin_density(image)
    else:
        grey = image.astype(np.float64)
        if meta["polarity"] == "dark":
            grey = -grey
    grey = grey - grey.min()
    return grey / max(grey.max(), 1e-12)


def run_blob_log(image, meta, radius, spacing):
    from skimage.feature import blob_log

    ndim = meta["ndim"]
    spacing = spacing or (1.0,) * ndim
    sigma = tuple(radius / np.sqrt(ndim) / s for s in spacing)
    grey = blob_log_input(image, meta)
    default = blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1)[:, :ndim]
    every = blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1, threshold=1e-6)[:, :ndim]
    response = -ndi.gaussian_laplace(grey, sigma) * float(np.mean(sigma)) ** 2
    scores = response[tuple(np.round(every).astype(int).T)] if len(every) else np.zeros(0)
    return default, every, scores


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    parser.add_argument("--datasets", default=None, help="comma-separated subset")
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--radius-factor", type=float, default=None,
                        help="voting radius / the dataset's typical radius (default: 1.5 in 2D, 1.25 in 3D)")
    parser.add_argument("--no-peer", action="store_true", help="skip blob_log")
    parser.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    data = Path(args.data)
    folders = sorted(p.parent for p in data.glob("*/meta.json"))
    if args.datasets:
        wanted = set(args.datasets.split(","))
        folders = [f for f in folders if f.name in wanted]
    if not folders:
        print(f"no datasets under {data}", file=sys.stderr)
        return 1
    xp = default_xp() if args.backend == "auto" else None
    device = backend_name(xp) if xp is not None else args.backend
    lines = [
        f"# Detection accuracy ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Device/backend: {device}; iterative_voting(backend={args.backend!r}), defaults except radius/spacing;"
        " tolerance = radius/2; P/R/F1 at the default threshold (pooled counts); AP = area under the pooled PR curve.",
        "",
        "| dataset | images | nuclei | radius | spacing | ours P | ours R | ours F1 | ours AP | blob_log P | blob_log R | blob_log F1 | blob_log AP | ours s/img |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        radius, spacing = dataset_geometry(meta)
        tol = radius / 2
        ours_match = peer_match = None
        ours_curve, peer_curve = [], []
        n_images, n_true, seconds = 0, 0, 0.0
        for _, image, centers in load_dataset(folder, args.max_images):
            polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
            t0 = time.perf_counter()
            factor = args.radius_factor or RADIUS_FACTOR[meta["ndim"]]
            found = iterative_voting(image, radius=factor * radius, spacing=spacing, polarity=polarity, backend=args.backend)
            seconds += time.perf_counter() - t0
            m = match_points(found.points, centers, tolerance=tol, spacing=spacing)
            ours_match = m if ours_match is None else ours_match + m
            every = found.with_threshold(None)  # every local maximum that passes the contrast test
            ours_curve.append((every.points, every.scores, centers, spacing))
            if not args.no_peer:
                default, every, scores = run_blob_log(image, meta, radius, spacing)
                m = match_points(default, centers, tolerance=tol, spacing=spacing)
                peer_match = m if peer_match is None else peer_match + m
                peer_curve.append((every, scores, centers, spacing))
            n_images += 1
            n_true += len(centers)
        ours_ap = pooled_precision_recall(ours_curve, tolerance=tol, max_thresholds=100).area
        row = [folder.name, str(n_images), str(n_true), f"{radius:.2f}", str(tuple(round(s, 3) for s in spacing)) if spacing else "1",
               f"{ours_match.precision:.3f}", f"{ours_match.recall:.3f}", f"**{ours_match.f1:.3f}**", f"{ours_ap:.3f}"]
        if peer_match is not None:
            peer_ap = pooled_precision_recall(peer_curve, tolerance=tol, max_thresholds=100).area
            row += [f"{peer_match.precision:.3f}", f"{peer_match.recall:.3f}", f"{peer_match.f1:.3f}", f"{peer_ap:.3f}"]
        else:
            row += ["-"] * 4
        row.append(f"{seconds / max(n_images, 1):.3f}")
        line = "| " + " | ".join(row) + " |"
        lines.append(line)
        print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
