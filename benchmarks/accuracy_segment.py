"""Accuracy of ivote.segment_nuclei on every dataset with instance labels.

For each dataset in the data folder that has ``labels/``: object F1 at IoU 0.5
and mean matched IoU (pooled over images), seeded (a) by the true centres and
(b) by our detections (``ivote.detect.iterative_voting``), against, in the same
run and with the same seeds,

* scikit-image watershed on the distance transform of an Otsu mask;
* a Voronoi-Otsu labelling (each Otsu-foreground pixel to its nearest seed).

RGB H&E images (gbm40) use the hematoxylin channel (``skimage.color.rgb2hed``),
nuclei bright. The segmentation radius is 1.3 times the dataset's median
nucleus radius (``meta.json``), the same for every image of a dataset; the
detector gets the same radius (its "largest nucleus radius").

Usage::

    python benchmarks/accuracy_segment.py [--data ../shared/data] [--max-images N]
        [--datasets dsb2018,gbm40] [--iterations 300] [--out benchmarks/results/segment_accuracy.md]
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
from scipy import ndimage as ndi
from skimage.color import rgb2hed
from skimage.filters import threshold_otsu
from skimage.segmentation import watershed

from ivote import backend_name
from ivote.metrics import match_labels
from ivote.segment import segment_nuclei

try:
    from ivote.detect import iterative_voting
except ImportError:  # detection stage not there
    iterative_voting = None

RADIUS_FACTOR = 1.3


def load_dataset(folder: Path, max_images: int | None):
    meta = json.loads((folder / "meta.json").read_text())
    ids = sorted(p.stem for p in (folder / "labels").glob("*.tif"))
    if max_images:
        ids = ids[:max_images]
    for image_id in ids:
        image = tifffile.imread(folder / "images" / f"{image_id}.tif")
        labels = tifffile.imread(folder / "labels" / f"{image_id}.tif").astype(np.int32)
        centers = np.loadtxt(folder / "centers" / f"{image_id}.csv", delimiter=",", skiprows=1, ndmin=2)
        centers = centers.reshape(-1, meta["ndim"])
        yield image_id, image, labels, centers, meta


def preprocess(image, meta):
    """Grey image with bright nuclei, float32."""
    if meta["channels"] == 3:
        return rgb2hed(image[..., :3])[..., 0].astype(np.float32)
    image = image.astype(np.float32)
    if meta["polarity"] == "dark":
        image = image.max() - image
    return image


def geometry(meta):
    """(spacing, largest and median per-axis radius in physical units). Without a spacing, a 3D
    dataset whose per-axis radii differ gets the spacing that makes its nuclei round."""
    ndim = meta["ndim"]
    r_px = np.broadcast_to(np.atleast_1d(np.asarray(meta["radius_px"], dtype=float)), (ndim,))
    if meta["spacing"]:
        spacing = tuple(float(s) for s in meta["spacing"])
    else:
        spacing = tuple(float(s) for s in r_px.max() / r_px)
    r = r_px * np.asarray(spacing)
    return spacing, float(r.max()), float(np.median(r))


def markers_from(seeds, shape):
    markers = np.zeros(shape, dtype=np.int32)
    idx = np.clip(np.rint(seeds).astype(int), 0, np.asarray(shape) - 1)
    markers[tuple(idx.T)] = np.arange(1, len(seeds) + 1)
    return markers


def otsu_mask(image):
    return image > threshold_otsu(image) if image.max() > image.min() else np.zeros(image.shape, bool)


def watershed_labels(image, seeds, spacing):
    mask = otsu_mask(image)
    distance = ndi.distance_transform_edt(mask, sampling=spacing)
    return watershed(-distance, markers_from(seeds, image.shape), mask=mask).astype(np.int32)


def voronoi_otsu_labels(image, seeds, spacing):
    mask = otsu_mask(image)
    markers = markers_from(seeds, image.shape)
    if not markers.any():
        return np.zeros(image.shape, np.int32)
    _, index = ndi.distance_transform_edt(markers == 0, sampling=spacing, return_indices=True)
    nearest = markers[tuple(index)]
    return np.where(mask, nearest, 0).astype(np.int32)


def detect_seeds(image, spacing, radius, backend="auto"):
    """Detections with the detector's defaults; ``radius`` is its largest nucleus radius."""
    if iterative_voting is None:
        return None
    points = iterative_voting(image, radius=radius, spacing=spacing, polarity="bright", backend=backend).points
    return np.asarray(points.get() if hasattr(points, "get") else points, dtype=float)


def _detect_one(task):
    folder, image_id, cache, backend = task
    meta = json.loads((Path(folder) / "meta.json").read_text())
    image = tifffile.imread(Path(folder) / "images" / f"{image_id}.tif")
    spacing, _, median_radius = geometry(meta)
    detected = detect_seeds(preprocess(image, meta), spacing, RADIUS_FACTOR * median_radius, backend)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(cache, detected, delimiter=",")
    return image_id, len(detected)


def fill_detection_cache(args):
    """Detect on every image not yet in the cache, ``--jobs`` processes at a time."""
    from multiprocessing import get_context

    tasks = []
    for folder in sorted(p for p in Path(args.data).iterdir() if (p / "labels").is_dir()):
        for path in sorted((folder / "labels").glob("*.tif"))[: args.max_images]:
            cache = Path(args.detections) / folder.name / f"{path.stem}.csv"
            if not cache.is_file():
                tasks.append((str(folder), path.stem, cache, args.detect_backend))
    with get_context("spawn").Pool(args.jobs) as pool:
        for image_id, n in pool.imap_unordered(_detect_one, tasks):
            print(f"detected {n} in {image_id}", file=sys.stderr, flush=True)


def run(args):
    if args.detections and args.jobs > 1 and iterative_voting is not None:
        fill_detection_cache(args)
    data = Path(args.data)
    wanted = set(args.datasets.split(",")) if args.datasets else None
    rows = []
    for folder in sorted(p for p in data.iterdir() if (p / "labels").is_dir()):
        if wanted and folder.name not in wanted:
            continue
        totals, times = {}, {}
        n_images = 0
        for image_id, image, truth, centers, meta in load_dataset(folder, args.max_images):
            n_images += 1
            grey = preprocess(image, meta)
            spacing, largest_radius, median_radius = geometry(meta)
            seed_sets = {"true centres": centers}
            cached = Path(args.detections) / folder.name / f"{image_id}.csv" if args.detections else None
            if cached is not None and cached.is_file():
                detected = np.loadtxt(cached, delimiter=",", ndmin=2).reshape(-1, meta["ndim"])
            else:
                detected = detect_seeds(grey, spacing, RADIUS_FACTOR * median_radius, args.detect_backend)
                if cached is not None and detected is not None:
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    np.savetxt(cached, detected, delimiter=",")
            if args.detections_only:
                continue
            seed_sets["detections"] = detected
            for seed_name, seeds in seed_sets.items():
                if seeds is None:
                    continue
                methods = {
                    "ivote level sets": lambda: segment_nuclei(
                        grey, seeds, radius=RADIUS_FACTOR * median_radius, spacing=spacing,
                        iterations=args.iterations, backend=args.backend),
                    "watershed (Otsu EDT)": lambda: watershed_labels(grey, seeds, spacing),
                    "Voronoi-Otsu": lambda: voronoi_otsu_labels(grey, seeds, spacing),
                }
                for method, fn in methods.items():
                    t0 = time.perf_counter()
                    labels = fn()
                    labels = labels.get() if hasattr(labels, "get") else labels
                    key = (seed_name, method)
                    times[key] = times.get(key, 0.0) + time.perf_counter() - t0
                    match = match_labels(labels, truth, iou_threshold=0.5)
                    totals[key] = match if key not in totals else totals[key] + match
        for seed_name in ("true centres", "detections"):
            for method in ("ivote level sets", "watershed (Otsu EDT)", "Voronoi-Otsu"):
                key = (seed_name, method)
                if key in totals:
                    m = totals[key]
                    rows.append((folder.name, n_images, seed_name, method, f"{m.f1:.3f}", f"{m.mean_matched_iou:.3f}",
                                 f"{times[key]:.1f}"))
                elif seed_name == "detections":
                    rows.append((folder.name, n_images, seed_name, method, "n/a", "n/a", "-"))
        print(f"{folder.name}: done", file=sys.stderr, flush=True)
        write_table(rows, args, final=False)
    write_table(rows, args, final=True)


def write_table(rows, args, final):
    header = ("dataset", "images", "seeds", "method", "F1@0.5", "mean matched IoU", "time s")
    lines = [
        f"# Segmentation accuracy ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"device: {backend_name()}; iterations {args.iterations}; radius {RADIUS_FACTOR} x median radius; "
        f"max images per dataset: {args.max_images or 'all'}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    if final:
        print(text)
    if args.out:
        Path(args.out).write_text(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--datasets", default=None, help="comma-separated subset")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--detections", default=None,
                        help="folder caching detections as <dataset>/<id>.csv (read when present, else written)")
    parser.add_argument("--detect-backend", default="auto", help="backend of the detector")
    parser.add_argument("--detections-only", action="store_true", help="only fill the detections cache")
    parser.add_argument("--jobs", type=int, default=1, help="processes filling the detections cache first")
    parser.add_argument("--out", default=None)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
