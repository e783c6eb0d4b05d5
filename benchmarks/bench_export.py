"""Benchmark the exports of a label image: outlines (ours) against the common per-label recipe, in one run.

Ours: ``ivote.export.label_outlines`` (``find_contours`` on each label's bounding box, found once by
``scipy.ndimage.find_objects``). Peer: ``skimage.measure.find_contours(labels == k, 0.5)`` for every
label k over the whole image, the recipe of most label-to-QuPath scripts. Both outline the same
nuclei; the outlines are checked to rasterise back to the labels (IoU 1.0 for ours) before any time
is printed. Also timed: writing the GeoJSON (with measurements) and the Fiji ROI set.

With ``--banded 4096 8192``: a label image of that size on disk (OME-Zarr-style Zarr array, tiles of
the synthetic labels with distinct ids) exported to a Fiji ROI set band by band (32 MB bands) and,
for the largest, read whole into memory first; each in its own process, its peak resident memory
(``ru_maxrss``) reported.

    python benchmarks/bench_export.py [--size 1024] [--banded 4096 8192] [--out benchmarks/results/export.md]
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


_CHILD = """
import resource, sys, time
import numpy as np, zarr
import ivote.export._bands as bands
from ivote.export import export_labels
path, out, mode = sys.argv[1:4]
labels = zarr.open_array(path, mode="r")
bands._BAND_BYTES = 32 * 2**20  # 32 MB bands: 2048 rows of 4096, 1024 of 8192
start = time.perf_counter()
export_labels(out, labels if mode == "banded" else np.asarray(labels))
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def banded_rows(sizes, tile) -> list[str]:
    """Peak memory of the banded export against the in-memory one, each in a fresh process."""
    import subprocess
    import sys

    import zarr

    rows = ["", "| label image | nuclei | mode | seconds | peak memory (MB) | labels in memory (MB) |",
            "| --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            path = Path(folder) / f"labels_{size}.zarr"
            array = zarr.open_array(str(path), mode="w", shape=(size, size), chunks=(1024, 1024), dtype="int32")
            n_tile = int(tile.max())
            for k, (r, c) in enumerate((r, c) for r in range(0, size, tile.shape[0])
                                       for c in range(0, size, tile.shape[1])):
                array[r:r + tile.shape[0], c:c + tile.shape[1]] = np.where(tile > 0, tile + k * n_tile, 0)
            n = (size // tile.shape[0]) * (size // tile.shape[1]) * (len(np.unique(tile)) - 1)
            modes = ("banded", "in memory") if size == max(sizes) else ("banded",)
            for mode in modes:
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).parents[1] / "src"),
                                                                               os.environ.get("PYTHONPATH")) if p))
                done = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(Path(folder) / "o.zip"), mode],
                                      capture_output=True, text=True, env=env, check=True)
                seconds, peak = (float(v) for v in done.stdout.split())
                rows.append(f"| {size} x {size} | {n} | {mode} | {seconds:.1f} | {peak:.0f} | "
                            f"{size * size * 4 / 2**20:.0f} |")
    return rows


def main(argv=None) -> int:
    from skimage.draw import polygon2mask

    from ivote.data import synthetic_nuclei
    from ivote.export import label_outlines, write_outlines_geojson, write_outlines_roi_zip

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--banded", type=int, nargs="*", default=(), metavar="SIZE")
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
        *(banded_rows(args.banded, labels) if args.banded else []),
        "",
        f"Load average during the run: {os.getloadavg()[0]:.1f} (times on a shared machine are upper bounds).",
        "",
        f"Command: `python benchmarks/bench_export.py --size {args.size}"
        + (f" --banded {' '.join(map(str, args.banded))}" if args.banded else "") + "`",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
