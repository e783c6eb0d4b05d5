"""Iterative voting against a LoG blob detector written with ``cupyx.scipy.ndimage``,
on the same synthetic nuclei (``bench_detect.make_image``), time and F1.

    python benchmarks/bench_log_peer.py [--cases 2d1024 3d256 3d512] [--repeat 10] [--out results.md]

The peer is what a GPU user writes in a few lines: normalise, ``-LoG`` at one
sigma (radius / sqrt(ndim), scale-normalised), local maxima over a box of the
radius, kept above Otsu's threshold of the maxima's responses (as
``benchmarks/accuracy_detect.py`` thresholds ``blob_log``). Both run on the GPU
after a warm-up; the time is the median of ``--repeat`` calls, each ending with
the points on the host. F1: ``ivote.metrics.match_points`` against the true
centres, tolerance 0.5 x radius. Iterative voting runs with its defaults.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_detect import _tile  # noqa: E402

from ivote._backend import backend_name, default_xp, to_device, to_host  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.detect import iterative_voting  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

CASES = {"2d1024": (2, 1024, 12.0), "3d256": (3, 256, 8.0), "3d512": (3, 512, 8.0)}


def log_detect(image, radius: float):
    """The peer: (N, ndim) points of a one-sigma LoG detector on the GPU."""
    import cupy as cp
    from cupyx.scipy import ndimage as cndi

    ndim = image.ndim
    grey = image.astype(cp.float32)
    grey = (grey - grey.min()) / cp.maximum(grey.max() - grey.min(), 1e-12)
    sigma = radius / np.sqrt(ndim)
    response = -cndi.gaussian_laplace(grey, sigma) * sigma**2
    size = max(3, int(radius) | 1)
    peaks = (response == cndi.maximum_filter(response, size=size)) & (response > 0)
    points = cp.argwhere(peaks)
    scores = response[peaks]
    if len(scores) > 1:
        from skimage.filters import threshold_otsu

        keep = scores >= float(threshold_otsu(to_host(scores)))
        points = points[keep]
    return to_host(points).astype(np.float64)


def _image_and_centres(ndim: int, size: int, radius: float):
    base = 1024 if ndim == 2 else 256
    sample = synthetic_nuclei((base,) * ndim, radius=radius, seed=7)
    assert np.array_equal(sample.image, _tile(ndim, base, radius))  # bench_detect's images
    reps = size // base
    if reps <= 1:
        return sample.image, sample.centers
    image = np.tile(sample.image, (reps,) * ndim)
    shifts = np.array(np.meshgrid(*[np.arange(reps) * base] * ndim, indexing="ij")).reshape(ndim, -1).T
    return image, np.concatenate([sample.centers + s for s in shifts])


def _median_seconds(call, repeat: int) -> float:
    xp = default_xp()
    start = time.perf_counter()
    while time.perf_counter() - start < 1.0:  # warm-up: compilation, tables, clocks
        call()
    times = []
    for _ in range(repeat):
        xp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    xp = default_xp()
    if xp is np:
        print("bench_log_peer needs a GPU (CuPy)")
        return 1
    rows = [f"# Iterative voting vs a cupyx LoG detector ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)",
            "", f"Device: {backend_name()}. Median of {args.repeat} calls after 1 s of warm-up; F1 at 0.5 x radius.",
            "", "| case | radius | true cells | ivote ms | ivote F1 | LoG ms | LoG F1 | ivote / LoG time |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in args.cases:
        ndim, size, radius = CASES[name]
        image, centres = _image_and_centres(ndim, size, radius)
        device_image = to_device(image.astype(np.float32), xp)
        ours = iterative_voting(device_image, radius=radius).points
        theirs = log_detect(device_image, radius)
        f1_ours = match_points(ours, centres, tolerance=0.5 * radius).f1
        f1_theirs = match_points(theirs, centres, tolerance=0.5 * radius).f1
        t_ours = _median_seconds(lambda: iterative_voting(device_image, radius=radius).points, args.repeat)
        t_theirs = _median_seconds(lambda: log_detect(device_image, radius), args.repeat)
        rows.append(f"| {ndim}D {size}^{ndim} | {radius:g} | {len(centres)} | {1e3 * t_ours:.2f} | {f1_ours:.3f} | "
                    f"{1e3 * t_theirs:.2f} | {f1_theirs:.3f} | {t_ours / t_theirs:.2f} |")
        print(rows[-1], flush=True)
        del device_image
    print("\n".join(rows[:5]))
    if args.out:
        Path(args.out).write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
