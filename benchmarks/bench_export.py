"""Benchmark the exports of a label image: outlines (ours) against the common per-label recipe, in one run.

Ours: ``ivote.export.label_outlines`` (``find_contours`` on each label's bounding box, found once by
``scipy.ndimage.find_objects``). Peer: ``skimage.measure.find_contours(labels == k, 0.5)`` for every
label k over the whole image, the recipe of most label-to-QuPath scripts. Both outline the same
nuclei; the outlines are checked to rasterise back to the labels (IoU 1.0 for ours) before any time
is printed. Also timed: writing the GeoJSON (with measurements) and the Fiji ROI set.

    python benchmarks/bench_export.py [--size 1024] [--out benchmarks/results/export.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np


def _timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def peer_outlines(labels):
    from skimage.measure import find_contours

    return {int(k): find_contours(labels == k, 0.5) for k in np.unique(labels) if k}


def main(argv=None) -> int:
    from skimage.draw import polygon2mask

    from ivote.data import synthetic_nuclei
    from ivote.export import label_outlines, write_outlines_geojson, write_outlines_roi_zip

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    sample = synthetic_nuclei((args.size, args.size), radius=8.0, n_nuclei=args.size ** 2 // 800, seed=0)
    labels = sample.labels.astype(np.int32)
    n = len(np.unique(labels)) - 1
    label_outlines(labels[:64, :64])  # imports and first calls outside the timing
    ours, t_ours = _timed(label_outlines, labels)
    peer, t_peer = _timed(peer_outlines, labels)
    assert {o.label for o in ours} == set(peer)
    for outline in ours[:: max(1, len(ours) // 50)]:  # a sample of 50: each rasterises back exactly
        mask = np.zeros(labels.shape, dtype=bool)
        for exterior, holes in outline.polygons:
            for ring in (exterior, *holes):
                mask ^= polygon2mask(labels.shape, ring)
        assert np.array_equal(mask, labels == outline.label), outline.label
    with tempfile.TemporaryDirectory() as folder:
        _, t_geojson = _timed(write_outlines_geojson, Path(folder) / "o.geojson", labels, spacing=(0.25, 0.25))
        size_geojson = os.path.getsize(Path(folder) / "o.geojson")
        _, t_roi = _timed(write_outlines_roi_zip, Path(folder) / "o.zip", labels)
        size_roi = os.path.getsize(Path(folder) / "o.zip")
    lines = [
        f"# Export of outlines ({datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, one thread)",
        "",
        f"{args.size} x {args.size} synthetic label image, {n} nuclei (radius 8 px).",
        "",
        "| step | seconds | per nucleus | note |",
        "| --- | --- | --- | --- |",
        f"| outlines, ours (`label_outlines`) | {t_ours:.3f} | {1e3 * t_ours / n:.3f} ms | "
        f"{t_peer / t_ours:.1f}x faster than the peer |",
        f"| outlines, peer (`find_contours(labels == k)` per label) | {t_peer:.3f} | {1e3 * t_peer / n:.3f} ms | |",
        f"| GeoJSON with measurements (`write_outlines_geojson`) | {t_geojson:.3f} | "
        f"{1e3 * t_geojson / n:.3f} ms | {size_geojson / 1e6:.1f} MB |",
        f"| Fiji ROI set (`write_outlines_roi_zip`) | {t_roi:.3f} | {1e3 * t_roi / n:.3f} ms | "
        f"{size_roi / 1e6:.1f} MB |",
        "",
        f"Load average during the run: {os.getloadavg()[0]:.1f} (times on a shared machine are upper bounds).",
        "",
        "Command: `python benchmarks/bench_export.py --size " + str(args.size) + "`",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
