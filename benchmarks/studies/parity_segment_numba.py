"""Agreement of the Numba and NumPy segmentations on real images (evaluation only): both seeded
with the true centres, per-object IoU between the two label images, and F1 at IoU 0.5 of each
against the ground truth. Same geometry and radius rule as ``accuracy_segment.py``.

Usage: python benchmarks/studies/parity_segment_numba.py [--data ../shared/data] [--datasets bbbc039 stardist3d]
       [--max-images N] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the accuracy scripts
from accuracy_segment import RADIUS_FACTOR, geometry, load_dataset, preprocess  # noqa: E402

from ivote.metrics import match_labels  # noqa: E402
from ivote.segment import segment_nuclei  # noqa: E402


def per_object_iou(a, b):
    """IoU of each label between two label images with the same label numbers (seed k -> label k + 1)."""
    n = int(max(a.max(), b.max())) + 1
    both = np.bincount(a[a == b].ravel(), minlength=n)
    size_a, size_b = np.bincount(a.ravel(), minlength=n), np.bincount(b.ravel(), minlength=n)
    present = (size_a + size_b) > 0
    present[0] = False
    union = size_a + size_b - both
    return both[present] / union[present]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--datasets", nargs="+", default=["bbbc039", "stardist3d"])
    parser.add_argument("--max-images", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets:
        for image_id, image, truth, centers, meta in load_dataset(Path(args.data) / name, args.max_images):
            spacing, _, median_radius = geometry(meta)
            grey = preprocess(image, meta)
            out, seconds = {}, {}
            for backend in ("numba", "numpy"):
                os.environ["IVOTE_BACKEND"] = backend
                t0 = time.perf_counter()
                out[backend] = segment_nuclei(grey, centers, radius=RADIUS_FACTOR * median_radius, spacing=spacing)
                seconds[backend] = time.perf_counter() - t0
            ious = per_object_iou(out["numba"], out["numpy"])
            row = dict(image=image_id, n=len(centers), objects=len(ious), min_iou=float(ious.min()),
                       mean_iou=float(ious.mean()), below=int((ious < 0.99).sum()),
                       identical=float((out["numba"] == out["numpy"]).mean()),
                       f1_numba=match_labels(out["numba"], truth).f1, f1_numpy=match_labels(out["numpy"], truth).f1,
                       s_numba=seconds["numba"], s_numpy=seconds["numpy"])
            print(row, flush=True)
            rows.append(row)
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"# parity_segment_numba ({now:%Y-%m-%d %H:%M} UTC)", "",
             "Seeds: the true centres; radius 1.3 x the dataset's median radius; segment_nuclei defaults.", "",
             "| image | seeds | objects | per-object IoU numba vs numpy: min / mean | objects < 0.99 | pixels equal | "
             "F1@0.5 numba / numpy | s numba / numpy |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['image']} | {r['n']} | {r['objects']} | {r['min_iou']:.4f} / {r['mean_iou']:.4f} | "
                     f"{r['below']} | {100 * r['identical']:.3f}% | {r['f1_numba']:.3f} / {r['f1_numpy']:.3f} | "
                     f"{r['s_numba']:.1f} / {r['s_numpy']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
