"""Does a learned feature map help iterative voting? ConvRBM features vs the Gaussian pre-blur.

For every dataset of the evaluation folder and every image, a ConvRBM is fitted
on the image itself (unsupervised: no labels are used), and
``ivote.detect.iterative_voting`` runs twice with the same radius, spacing and
polarity as ``benchmarks/accuracy_detect.py``: once with its default Gaussian
pre-blur, once with ``features=model`` (the model's ``detection_input``: the
first principal component of its hidden maps).
Reported: precision, recall, F1 at the default (Otsu) threshold, pooled over
the images, and the area under the pooled precision-recall curve.

Usage: python benchmarks/accuracy_features.py [--data DIR] [--datasets a,b] [--max-images N]
       [--filters 16] [--epochs 10] [--hidden-extent valid|same] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import accuracy_detect  # noqa: E402  (the detection benchmark's geometry and loader, same conventions)

from ivote._backend import backend_name, default_xp  # noqa: E402
from ivote.detect import iterative_voting  # noqa: E402
from ivote.features import ConvRBM  # noqa: E402
from ivote.features._learn import as_grayscale, default_patch_shape  # noqa: E402
from ivote.metrics import match_points, pooled_precision_recall  # noqa: E402


dataset_geometry, load_dataset = accuracy_detect.dataset_geometry, accuracy_detect.load_dataset


def radius_factor(ndim: int) -> float:
    """Voting radius / typical radius, as accuracy_detect.py uses it."""
    factor = accuracy_detect.RADIUS_FACTOR
    return float(factor[ndim] if isinstance(factor, dict) else factor)


def filter_size(radius_px: float) -> int:
    """An odd filter about the nucleus radius, 5 to 13 pixels (the thesis' range)."""
    return int(min(13, max(5, 2 * round(radius_px / 2) + 1)))


def fit_on_image(image, meta, radius, args):
    grey = as_grayscale(image, rgb=meta["channels"] == 3)
    size = filter_size(radius if meta["ndim"] == 2 else min(meta["radius_px"]))
    for learning_rate in (args.learning_rate, args.learning_rate / 3, args.learning_rate / 10):
        model = ConvRBM(args.filters, size, stride=args.stride, seed=0, hidden_extent=args.hidden_extent)
        try:
            model.fit(grey, epochs=args.epochs, patch_shape=default_patch_shape(grey.shape, size, args.stride),
                      learning_rate=learning_rate)
        except FloatingPointError:  # Gaussian-ReLU RBMs can diverge: retry with a smaller step
            continue
        return model, size
    raise FloatingPointError(f"training diverged at every learning rate down to {learning_rate:g}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--datasets", default=None, help="comma-separated subset")
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--filters", type=int, default=16)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--hidden-extent", default="valid", choices=("valid", "same"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in Path(args.data).glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    if not folders:
        print(f"no datasets under {args.data}", file=sys.stderr)
        return 1
    lines = [
        f"# Detection with learned features vs Gaussian blur "
        f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Device/backend: {backend_name(default_xp())}. ConvRBM: {args.filters} filters, stride {args.stride}, "
        f"hidden extent '{args.hidden_extent}', "
        f"{args.epochs} epochs on tiles of the image itself, lr {args.learning_rate:g}; voting radius as "
        "accuracy_detect.py (RADIUS_FACTOR x typical radius); tolerance radius/2; P/R/F1 at Otsu (pooled); AP = area under the "
        "pooled PR curve.",
        "",
        "| dataset | images | nuclei | filter | blur P | blur R | blur F1 | blur AP | features P | features R "
        "| features F1 | features AP | fit s/img |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        radius, spacing = dataset_geometry(meta)
        tol = radius / 2
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        matches = {"blur": None, "features": None}
        curves = {"blur": [], "features": []}
        n_images = n_true = 0
        fit_seconds = 0.0
        size = None
        for _, image, centers in load_dataset(folder, args.max_images):
            t0 = time.perf_counter()
            model, size = fit_on_image(image, meta, radius, args)
            fit_seconds += time.perf_counter() - t0
            for kind, features in (("blur", None), ("features", model)):
                found = iterative_voting(image, radius=radius_factor(meta["ndim"]) * radius, spacing=spacing, polarity=polarity,
                                         features=features)
                m = match_points(found.points, centers, tolerance=tol, spacing=spacing)
                matches[kind] = m if matches[kind] is None else matches[kind] + m
                curves[kind].append((found.candidates, found.candidate_scores, centers, spacing))
            n_images += 1
            n_true += len(centers)
        row = [folder.name, str(n_images), str(n_true), str(size)]
        for kind in ("blur", "features"):
            m = matches[kind]
            area = pooled_precision_recall(curves[kind], tolerance=tol).area
            row += [f"{m.precision:.3f}", f"{m.recall:.3f}", f"{m.f1:.3f}", f"{area:.3f}"]
        row.append(f"{fit_seconds / max(n_images, 1):.2f}")
        line = "| " + " | ".join(row) + " |"
        lines.append(line)
        print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
