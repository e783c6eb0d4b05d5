"""The Numba backend gives the NumPy path's cells on real images.

For a few images of each dataset of the evaluation data folder (settings as in
``accuracy_detect.py``: radius and spacing from ``meta.json`` only), runs
``iterative_voting`` with ``backend="numpy"`` and ``backend="numba"`` and
reports: the number of points of each, how many points of one have no point of
the other within one pixel, the largest distance between paired points, the
largest relative score difference, whether every candidate (local maximum) and
its contrast agree, the match to the ground truth (F1, the same for both when
the points agree) and both run times.

Usage: python benchmarks/studies/parity_numba_detect.py [--data DIR] [--datasets bbbc039,gbm40,stardist3d,qcanet3d]
       [--max-images 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the accuracy scripts
from accuracy_detect import RADIUS_FACTOR, REPO, dataset_geometry, load_dataset  # noqa: E402

from ivote._backend import backend_name, cpu_threads  # noqa: E402
from ivote.detect import iterative_voting  # noqa: E402
from ivote.metrics import match_points  # noqa: E402


def _compare(numpy_found, numba_found):
    """(unpaired points within 1 px, largest paired distance, largest relative score difference)."""
    a, b = numpy_found.points, numba_found.points
    if len(a) == 0 or len(b) == 0:
        return len(a) + len(b), 0.0, 0.0
    distance, index = cKDTree(b).query(a, distance_upper_bound=1.0 + 1e-9)
    paired = np.isfinite(distance)
    unpaired = int((~paired).sum()) + (len(b) - len(set(index[paired].tolist())))
    largest = float(distance[paired].max()) if paired.any() else 0.0
    score_a, score_b = numpy_found.scores[paired], numba_found.scores[index[paired]]
    relative = float(np.max(np.abs(score_a - score_b) / np.maximum(np.abs(score_a), 1e-300))) if paired.any() else 0.0
    return unpaired, largest, relative


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--datasets", default="bbbc039,gbm40,stardist3d,qcanet3d")
    parser.add_argument("--max-images", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    lines = [
        f"# Numba vs NumPy detection on real images ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"CPU backend: {backend_name(np)}; {cpu_threads()} threads. Settings as accuracy_detect.py (radius from meta.json).",
        "",
        "| dataset | image | shape | points NumPy / Numba | unpaired within 1 px | max paired distance px | max rel. score diff |"
        " candidates and contrasts equal | F1 NumPy / Numba | NumPy s | Numba s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    for name in args.datasets.split(","):
        folder = Path(args.data) / name
        if not (folder / "meta.json").exists():
            print(f"(no dataset {name})", flush=True)
            continue
        meta = json.loads((folder / "meta.json").read_text())
        radius, spacing = dataset_geometry(meta)
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        kwargs = dict(radius=RADIUS_FACTOR[meta["ndim"]] * radius, spacing=spacing, polarity=polarity)
        iterative_voting(next(load_dataset(folder, 1))[1], backend="numba", **kwargs)  # compile / tables
        for image_id, image, centers in load_dataset(folder, args.max_images):
            t0 = time.perf_counter()
            reference = iterative_voting(image, backend="numpy", **kwargs)
            t1 = time.perf_counter()
            compiled = iterative_voting(image, backend="numba", **kwargs)
            t2 = time.perf_counter()
            unpaired, largest, relative = _compare(reference, compiled)
            same = (np.array_equal(reference.candidates, compiled.candidates)
                    and np.allclose(reference.candidate_contrasts, compiled.candidate_contrasts, rtol=1e-9))
            f1 = [match_points(f.points, centers, tolerance=radius / 2, spacing=spacing).f1 for f in (reference, compiled)]
            row = [name, image_id, "x".join(map(str, image.shape)), f"{len(reference.points)} / {len(compiled.points)}",
                   str(unpaired), f"{largest:.2f}", f"{relative:.1e}", "yes" if same else "NO",
                   f"{f1[0]:.3f} / {f1[1]:.3f}", f"{t1 - t0:.2f}", f"{t2 - t1:.3f}"]
            line = "| " + " | ".join(row) + " |"
            lines.append(line)
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
