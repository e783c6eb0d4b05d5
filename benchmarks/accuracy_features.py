"""Does a learned feature map help iterative voting? ConvRBM features vs the Gaussian pre-blur.

For every dataset of the evaluation folder and every image, the recommended
ConvRBM (``ivote.features.NucleusFeatures``: 8 filters about half the voting
radius wide, 10 epochs on tiles of the image itself, no labels) is fitted on
the image, and ``ivote.detect.iterative_voting`` runs with the same radius,
spacing and polarity as ``benchmarks/accuracy_detect.py`` (a per-image radius
from the labels: 1.5 x the median equivalent radius in 2D, 1.25 x in 3D,
tolerance half the median radius) on:

* ``blur``: the default Gaussian pre-blur (2 pixels), the peer;
* ``features``: the model's detection input (its reconstruction, then the
  same 2-pixel blur);
* ``PC``: the earlier detection input, the first principal component of the
  hidden maps (same model);
* ``nucleus map``: the hidden map of the same model most correlated with the
  detection signal (the filter that fires on nuclei; no labels), blurred
  with a quarter of the typical radius (``detection_input(source="nucleus_map")``,
  ``NucleusFeatures(r, source="nucleus_map")``);
* ``blur F r`` (``--blur-sweep F,F,...``): the peer to beat, the Gaussian
  pre-blur widened to F x the image's true median radius (F = 0.25 is
  ``--wide-blur``; it needs the labels' radius, so it is an upper bound on
  what a blur width rule can reach);
* ``--map-variants``: other unsupervised uses of the same model's maps (issue
  17's search for a map that earns its place): the nucleus map blurred by
  2 px or r/3, its square root (compressed dynamic range), the nucleus
  filter's pre-activation (no ReLU), the sum of the hidden maps weighted by
  their positive correlation with the image, and the nucleus map plus the
  image blurred by r/4 (equal weights, both standardised); r the true radius.

``--ceiling`` adds, per map, the recall of every local maximum of the vote
field (any score, any contrast): no threshold can recall more, and a row
giving, per image, the best map's F1 at the default threshold: no
unsupervised choice among the maps can do better.

Reported per dataset: F1 at the default threshold (pooled over the images) and
with a per-image oracle threshold (accuracy_detect.oracle_match: each image's
best threshold over the maxima that pass the default contrast test), the
fitting CPU time per image (process time: run with NUMBA_NUM_THREADS=1 for a
per-core figure), all in one run.

Usage: python benchmarks/accuracy_features.py [--data DIR] [--datasets a,b] [--max-images N]
       [--backend numba|numpy|cupy|auto] [--wide-blur] [--blur-sweep 0.15,0.25,...] [--map-variants]
       [--ceiling] [--out FILE]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import accuracy_detect  # noqa: E402  (the detection benchmark's loader, radius rule and oracle)

from ivote._backend import backend_name, default_xp  # noqa: E402
from ivote.detect import hematoxylin_density, iterative_voting  # noqa: E402
from ivote.features import NucleusFeatures  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

KINDS = ("blur", "features", "PC", "nucleus map")
VARIANTS = ("nucleus map 2 px", "nucleus map r/3", "sqrt nucleus map r/4", "pre-activation r/4",
            "correlation-weighted sum r/4", "nucleus map + blur r/4")


def _standardised(values):
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean()) / max(float(values.std()), 1e-12)


def variant_maps(model, image, typical):
    """``--map-variants``' maps (module docstring) of a fitted 2D model; ``typical`` the true radius in pixels."""
    rgb = image.ndim == 3 and image.shape[-1] in (3, 4)
    grey = _standardised(hematoxylin_density(image) if rgb else image)
    maps = np.asarray(model.transform(grey), dtype=np.float64)
    centred = maps - maps.mean(axis=tuple(range(1, maps.ndim)), keepdims=True)
    correlation = np.array([np.corrcoef(c.ravel(), grey.ravel())[0, 1] if c.std() > 0 else 0.0 for c in centred])
    nucleus = int(np.argmax(correlation))
    filters = np.asarray(model.filters_, dtype=np.float64)
    pre = ndi.correlate(grey, filters[nucleus], mode="constant") + float(model.hidden_bias_[nucleus])

    def blurred(values, sigma):
        return _standardised(ndi.gaussian_filter(np.asarray(values, dtype=np.float64), sigma, mode="nearest"))

    quarter = typical / 4
    return {"nucleus map 2 px": blurred(maps[nucleus], 2.0), "nucleus map r/3": blurred(maps[nucleus], typical / 3),
            "sqrt nucleus map r/4": blurred(np.sqrt(maps[nucleus]), quarter),
            "pre-activation r/4": blurred(pre, quarter),
            "correlation-weighted sum r/4": blurred(np.tensordot(np.clip(correlation, 0, None), maps, 1), quarter),
            "nucleus map + blur r/4": _standardised(blurred(maps[nucleus], quarter) + blurred(grey, quarter))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(accuracy_detect.DEFAULT_DATA))
    parser.add_argument("--datasets", default=None, help="comma-separated subset")
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--max-images-other", type=int, default=None,
                        help="at most this many images of the datasets other than gbm40")
    parser.add_argument("--backend", default="auto", choices=("auto", "numpy", "numba", "cupy"))
    parser.add_argument("--wide-blur", action="store_true", help="add the blur 0.25 r peer (--blur-sweep 0.25)")
    parser.add_argument("--blur-sweep", default=None,
                        help="comma-separated factors F: add a blur of F x the true median radius per F")
    parser.add_argument("--map-variants", action="store_true", help="add the other maps of the model (2D only)")
    parser.add_argument("--ceiling", action="store_true",
                        help="add each map's recall of every maximum, and the per-image best map at the default")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in Path(args.data).glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    if not folders:
        print(f"no datasets under {args.data}", file=sys.stderr)
        return 1
    factors = [float(f) for f in args.blur_sweep.split(",")] if args.blur_sweep else []
    if args.wide_blur and 0.25 not in factors:
        factors.append(0.25)
    kinds = list(KINDS) + [f"blur {f:g} r" for f in factors] + (list(VARIANTS) if args.map_variants else [])
    lines = [
        f"# Detection with learned features vs Gaussian blur "
        f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Device/backend: {backend_name(default_xp()) if args.backend == 'auto' else args.backend}. "
        "Radius per image from the labels (accuracy_detect.py's rule); F1 at the default threshold / with a "
        "per-image oracle threshold, pooled; NucleusFeatures fitted on each image.",
        "",
        "| dataset | images | nuclei | " + " | ".join(f"{k} F1 / oracle" for k in kinds)
        + (" | best map per image F1" if args.ceiling else "") + " | fit CPU s/img |",
        "| --- | --- | --- | " + " | ".join("---" for _ in kinds) + (" | ---" if args.ceiling else "") + " | --- |",
    ]
    print("\n".join(lines), flush=True)
    notes = []
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        dataset_radius, spacing = accuracy_detect.dataset_geometry(meta)
        ndim = meta["ndim"]
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        limit = args.max_images if folder.name == "gbm40" or args.max_images_other is None else args.max_images_other
        default = {k: None for k in kinds}
        oracle = {k: None for k in kinds}
        every_maximum = {k: None for k in kinds}
        best_map = None
        n_images = n_true = 0
        fit_seconds = 0.0
        for image_id, image, centers in accuracy_detect.load_dataset(folder, limit):
            labels_path = folder / "labels" / f"{image_id}.tif"
            typical = (accuracy_detect.true_radius(tifffile.imread(labels_path), spacing) if labels_path.exists()
                       else np.nan)
            if not np.isfinite(typical):
                typical = dataset_radius
            radius, tol = accuracy_detect.RADIUS_FACTOR[ndim] * typical, typical / 2
            t0 = time.process_time()
            learned = NucleusFeatures(radius, spacing=spacing)
            model = learned.fit(image)
            fit_seconds += time.process_time() - t0
            inputs = {"blur": dict(), "features": dict(features=model.detection_input(image)),  # RGB: read as H&E
                      "PC": dict(features=model.detection_input(image, source="principal_component")),
                      "nucleus map": dict(features=model.detection_input(image, source="nucleus_map",
                                                                         blur=typical / 4))}
            inputs.update({f"blur {f:g} r": dict(blur=f * typical) for f in factors})
            if args.map_variants and ndim == 2:
                inputs.update({k: dict(features=v) for k, v in variant_maps(model, image, typical).items()})
            this_image = []
            for kind in kinds:
                if kind not in inputs:  # a 2D-only variant on a volume
                    continue
                found = iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity,
                                         backend=args.backend, **inputs[kind])
                m = match_points(found.points, centers, tolerance=tol, spacing=spacing)
                every = found.with_threshold(None, min_contrast=accuracy_detect.DEFAULT_MIN_CONTRAST)
                best = accuracy_detect.oracle_match(every.points, every.scores, centers, tol, spacing)
                default[kind] = m if default[kind] is None else default[kind] + m
                oracle[kind] = best if oracle[kind] is None else oracle[kind] + best
                this_image.append(m)
                if args.ceiling:
                    maxima = match_points(found.candidates, centers, tolerance=tol, spacing=spacing)
                    every_maximum[kind] = maxima if every_maximum[kind] is None else every_maximum[kind] + maxima
            if args.ceiling:
                top = max(this_image, key=lambda match: match.f1)
                best_map = top if best_map is None else best_map + top
            n_images += 1
            n_true += len(centers)
            print(f"  {image_id}: " + ", ".join(f"{k} {default[k].f1:.3f}/{oracle[k].f1:.3f}" for k in kinds
                                                 if default[k] is not None)
                  + f" (running), fit {fit_seconds / n_images:.1f} s", file=sys.stderr, flush=True)
        row = [folder.name, str(n_images), str(n_true)]
        row += [f"{default[k].f1:.3f} / {oracle[k].f1:.3f}" if default[k] is not None else "-" for k in kinds]
        if args.ceiling:
            row.append(f"{best_map.f1:.3f}" if best_map is not None else "-")
        row.append(f"{fit_seconds / max(n_images, 1):.1f}")
        line = "| " + " | ".join(row) + " |"
        lines.append(line)
        print(line, flush=True)
        if args.ceiling and n_images:
            ceiling = (f"  {folder.name}: recall of every maximum (no threshold recalls more): "
                       + ", ".join(f"{k} {every_maximum[k].recall:.3f}" for k in kinds if every_maximum[k] is not None)
                       + "; precision / recall at the default: "
                       + ", ".join(f"{k} {default[k].precision:.3f} / {default[k].recall:.3f}" for k in kinds
                                   if default[k] is not None))
            notes.append(ceiling)
            print(ceiling, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines + ([""] + notes if notes else [])) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
