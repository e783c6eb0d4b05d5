"""Benchmark the compute part of the "Detect nuclei" widget (no napari needed).

What the widget's worker calls on a slider release, timed end to end as the
user waits for it (host image in, host points out, GPU pools emptied after):
``ivote.napari._detect_logic.run_request``. Ours: the default backend (the GPU
when there is one). Peer: the same call on the NumPy backend, in the same run.

Cases
-----
* 2D preview = Run: a 1024x1024 synthetic tile at 0.5 µm/px, nuclei up to 6 µm.
* 3D preview: the slab about 2r thick around the middle plane of a
  48x320x320 anisotropic volume at (2, 0.5, 0.5) µm (what a radius drag computes).
* 3D Run: the whole volume.

The NumPy peer runs on the 2D case; on the 3D cases only with ``--full`` (minutes).

Detections are checked against the synthetic truth (F1, tolerance r/2) before
timings are printed.

    python benchmarks/bench_widget_compute.py [--repeat 5] [--full] [--out benchmarks/results/widget_compute.md]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

import numpy as np

from ivote._backend import backend_name, default_xp
from ivote.data import synthetic_nuclei
from ivote.metrics import match_points
from ivote.napari._detect_logic import DetectRequest, image_geometry, preview_slab, run_request


def _time(request, repeat, warm_up=True):
    first = run_request(request) if warm_up else None  # kernel compilation, FFT plans, memory pools
    seconds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run_request(request)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds), result, first


def _f1(result, sample, z_range=None):
    """F1 against the truth; for a slab, of the nuclei centred within r/2 of its middle plane."""
    points, _, _ = result.points("otsu")
    truth = sample.centers
    if z_range is None:
        return match_points(points, truth, tolerance=0.5 * sample.radius, spacing=sample.spacing).f1
    # match everything in the slab, count only the centre: faces cut nuclei, as they do for any crop
    inside = lambda p: (p[:, 0] >= z_range[0]) & (p[:, 0] < z_range[1])  # noqa: E731
    points, truth = points[inside(points)], truth[inside(truth)]
    match = match_points(points, truth, tolerance=0.5 * sample.radius, spacing=sample.spacing)
    middle = (z_range[0] + z_range[1] - 1) / 2.0
    near = lambda p: np.abs(p[:, 0] - middle) * sample.spacing[0] <= 0.5 * sample.radius  # noqa: E731
    matched_points, matched_truth = match.pairs[:, 0], match.pairs[:, 1]
    tp = int(near(truth[matched_truth]).sum()) if len(matched_truth) else 0
    n_true, n_found = int(near(truth).sum()), int(near(points).sum()) if len(points) else 0
    fp = n_found - (int(near(points[matched_points]).sum()) if len(matched_points) else 0)
    return 2 * tp / max(2 * tp + (n_true - tp) + fp, 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="also time the NumPy peer on the whole 3D volume")
    parser.add_argument("--out", help="write the results table (markdown) here")
    parser.add_argument("--small", action="store_true", help="smoke test: 256² and 24x96x96")
    args = parser.parse_args(argv)

    device = backend_name(default_xp())
    on_gpu = default_xp() is not np
    side, depth, width = (256, 24, 96) if args.small else (1024, 48, 320)
    image2d = synthetic_nuclei((side, side), spacing=(0.5, 0.5), radius=6.0, overlap=0.2, noise=0.05, seed=11)
    volume = synthetic_nuclei((depth, width, width), spacing=(2.0, 0.5, 0.5), radius=6.0, overlap=0.2, noise=0.05,
                              seed=12)
    geometry = image_geometry(volume.image.shape, scale=volume.spacing)
    slab, start = preview_slab(geometry, volume.radius, plane=depth // 2)
    cases = [
        (f"2D {side}² preview/Run", DetectRequest(image2d.image, 6.0, image2d.spacing), image2d, None, True),
        (f"3D slab {slab.stop - slab.start}x{width}x{width} preview",
         DetectRequest(volume.image[slab], 6.0, volume.spacing, offset=(start, 0, 0)), volume,
         (slab.start, slab.stop), args.full),
        (f"3D {depth}x{width}x{width} Run", DetectRequest(volume.image, 6.0, volume.spacing), volume, None, args.full),
    ]
    rows = []
    for index, (name, request, sample, z_range, with_peer) in enumerate(cases):
        if not on_gpu and index == 2 and not args.full:
            continue  # the NumPy run of the whole volume takes many minutes
        ours, result, first = _time(request, args.repeat if on_gpu else 1, warm_up=on_gpu)
        f1 = _f1(result, sample, z_range)
        if first is not None and not np.array_equal(first.detections.candidates, result.detections.candidates):
            name += f" (warm-up run found {len(first.points()[0])} nuclei, later runs differ!)"
        peer = "n/a"
        if with_peer and on_gpu:
            t0 = time.perf_counter()
            peer_result = run_request(DetectRequest(**{**request.__dict__, "backend": "numpy"}))
            peer = time.perf_counter() - t0
            same = np.array_equal(peer_result.detections.candidates, result.detections.candidates)
            name += "" if same else " (NumPy maxima differ!)"
        ratio = f"{peer / ours:.1f}x" if isinstance(peer, float) else "n/a"
        peer_text = f"{peer:.3f}" if isinstance(peer, float) else peer
        rows.append((name, f"{ours:.3f}", peer_text, ratio, f"{f1:.3f}", str(len(result.points()[0]))))
        print(f"  {name}: ours {ours:.3f} s, NumPy {peer_text} s, F1 {f1:.3f}", flush=True)

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Detect nuclei widget: compute per slider release / Run",
        "",
        f"device: {device}; date: {date}",
        "ours: `_detect_logic.run_request` on the default backend ("
        + (f"median of {args.repeat} after a warm-up" if on_gpu else "one run") + ", wall clock, host in/out);"
        " peer: the same call on NumPy, one run.",
        "",
        "| case | ours (s) | NumPy peer (s) | ratio | F1 | nuclei |",
        "| --- | --- | --- | --- | --- | --- |",
    ] + [f"| {' | '.join(row)} |" for row in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
