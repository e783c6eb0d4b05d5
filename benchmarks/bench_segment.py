"""Speed of ivote.segment_nuclei: GPU against our NumPy path and scikit-image's chan_vese.

Cases (full): 1024^2 with 200 nuclei and 256^3 with 300 nuclei, 500 iterations
(``tol=0``: no early stop). ``--quick``: 512^2/50 and 128^3/40.

* GPU: the whole call (set-up, 500 fused iterations, reinitialisations,
  shape-prior fits, labels), CUDA events, after a warm-up call (compilation).
* The fused kernel alone: 200 bare launches timed with CUDA events, its
  achieved bandwidth (essential traffic: phi read + write and, per valid cell,
  image, overlap canvas read and zeroing: 20 bytes a cell; the canvas atomics
  are not counted) against a device-to-device copy measured in the same run.
* NumPy path: the same call with a few iterations, per-iteration time
  extrapolated to 500 (the set-up, timed with 0 iterations, is added once).
* scikit-image: ``skimage.segmentation.chan_vese`` run on each object's box for
  500 iterations (2D only), on a subset of objects, extrapolated to all.

Usage: python benchmarks/bench_segment.py [--quick] [--out benchmarks/results/segment.md]
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import numpy as np

from ivote._backend import backend_name, cupy_available, default_xp, to_device, to_host
from ivote.data import synthetic_nuclei
from ivote.metrics import match_labels
from ivote.segment import segment_nuclei
from ivote.segment import _segment
from ivote.segment._cuda import CudaStepper
from ivote.segment._shape_prior import fit_poses, moment_features

ITERATIONS = 500


def gpu_time(fn, repeats=3):
    xp = default_xp()
    fn()  # warm-up: compilation, graph capture, memory pool
    xp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(repeats):
        start, end = xp.cuda.Event(), xp.cuda.Event()
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        times.append(xp.cuda.get_elapsed_time(start, end) / 1e3)
    return min(times), out


def copy_bandwidth(nbytes=1 << 28):
    xp = default_xp()
    a = xp.ones(nbytes // 4, dtype=xp.float32)
    b = xp.empty_like(a)
    b[...] = a
    start, end = xp.cuda.Event(), xp.cuda.Event()
    start.record()
    for _ in range(10):
        b[...] = a
    end.record()
    end.synchronize()
    seconds = xp.cuda.get_elapsed_time(start, end) / 1e3 / 10
    return 2 * nbytes / seconds


def kernel_bandwidth(image, seeds, radius, spacing, launches=200):
    """Time bare fused launches on the case's real batch (after one normal block)."""
    xp = default_xp()
    weights = dict(_segment.DEFAULT_WEIGHTS)
    ndim = image.ndim
    image_d = to_device(image.astype(np.float32), xp)
    normalised = _segment._normalise(image_d, "bright", xp)
    batch = _segment._build_batch(normalised, seeds, radius, tuple(float(s) for s in spacing), weights, 1.5, xp)
    phi = _segment._initial_level_sets(seeds, batch, 0.5 * radius, xp)
    pose = fit_poses((phi > 0) & batch.valid, moment_features(batch.box_shape, batch.spacing, xp), batch.spacing,
                     batch.prior, xp)
    stepper = CudaStepper(batch, block_length=50, use_graph=False)
    stepper.run(phi, pose, 50)
    stepper.steps_only(10, start=51)
    start, end = xp.cuda.Event(), xp.cuda.Event()
    start.record()
    stepper.steps_only(launches, start=61)
    end.record()
    end.synchronize()
    per_launch = xp.cuda.get_elapsed_time(start, end) / 1e3 / launches
    valid_cells = int(batch.valid.sum())
    nbytes = 8 * stepper.cells + 12 * valid_cells
    return per_launch, nbytes / per_launch, stepper.cells, stepper.kernel_name


def numpy_time(image, seeds, kwargs, iterations):
    segment_nuclei(image, seeds, iterations=0, backend="numpy", **kwargs)  # warm-up: trains the shape prior
    t0 = time.perf_counter()
    segment_nuclei(image, seeds, iterations=0, backend="numpy", **kwargs)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    segment_nuclei(image, seeds, iterations=iterations, backend="numpy", **kwargs)
    total = time.perf_counter() - t0
    per_iteration = max(total - setup, 1e-9) / iterations
    return setup + per_iteration * ITERATIONS, per_iteration


def skimage_time(image, seeds, radius, n_objects):
    from skimage.segmentation import chan_vese

    half = int(np.ceil(1.5 * radius)) + 1
    padded = np.pad(image.astype(np.float64), half, mode="edge")
    subset = seeds[:n_objects]
    t0 = time.perf_counter()
    for seed in np.rint(subset).astype(int):
        box = padded[tuple(slice(c, c + 2 * half + 1) for c in seed)]
        chan_vese(box, mu=0.2, lambda1=1.0, lambda2=2.0, max_num_iter=ITERATIONS, tol=0)
    return (time.perf_counter() - t0) / len(subset) * len(seeds)


def run_case(name, shape, n_nuclei, radius, numpy_iterations, skimage_objects, copy_bw):
    image, truth, centers, spacing, _ = synthetic_nuclei(shape, radius=radius, n_nuclei=n_nuclei, overlap=0.2, seed=5)
    kwargs = dict(radius=radius, spacing=spacing, tol=0)
    image_d = to_device(image)
    gpu_s, labels = gpu_time(lambda: segment_nuclei(image_d, centers, iterations=ITERATIONS, **kwargs))
    f1 = match_labels(to_host(labels), truth).f1
    # the share of reinitialisations (two exact EDTs each) and shape fits: the same call, reinitialising 4x less
    sparse_s, _ = gpu_time(lambda: segment_nuclei(image_d, centers, iterations=ITERATIONS, reinit_every=100, **kwargs),
                           repeats=2)
    per_launch, bandwidth, cells, kernel_name = kernel_bandwidth(image, centers, radius, spacing)
    np_s, np_per_iter = numpy_time(image, centers, kwargs, numpy_iterations)
    sk_s = skimage_time(image, centers, radius, skimage_objects) if image.ndim == 2 else None
    updates = cells * ITERATIONS / gpu_s
    return {
        "case": f"{name}: {'x'.join(map(str, shape))}, {len(centers)} nuclei, r={radius}, {ITERATIONS} it",
        "gpu_ms": 1e3 * gpu_s, "gpu_sparse_ms": 1e3 * sparse_s, "numpy_s": np_s, "numpy_iters": numpy_iterations, "skimage_s": sk_s,
        "skimage_objects": skimage_objects, "updates": updates, "cells": cells, "kernel_us": 1e6 * per_launch,
        "kernel_gbs": bandwidth / 1e9, "copy_gbs": copy_bw / 1e9, "f1": f1, "kernel": kernel_name,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller cases (512^2/50, 128^3/40)")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args(argv)
    if not cupy_available():
        raise SystemExit("bench_segment.py needs a GPU (CuPy); the NumPy path is timed against it")
    print(f"device: {backend_name()}", flush=True)
    if args.quick:
        cases = [("2D", (512, 512), 50, 20.0, 10, 3), ("3D", (128, 128, 128), 40, 12.0, 3, 0)]
    else:
        cases = [("2D", (1024, 1024), 200, 20.0, 10, 5), ("3D", (256, 256, 256), 300, 12.0, 2, 0)]
    copy_bw = copy_bandwidth()
    rows = []
    for case in cases:
        try:
            rows.append(run_case(*case, copy_bw))
        except Exception as exc:  # report the case and go on with the next one
            print(f"case {case[0]} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        print(rows[-1], flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        f"# bench_segment ({now:%Y-%m-%d %H:%M} UTC)",
        "",
        f"device: {backend_name()}; device-to-device copy {copy_bw / 1e9:.0f} GB/s (read + write)",
        "",
        "| case | GPU ms (whole call) | GPU ms, reinit every 100 | NumPy s (extrapolated) | GPU speed-up vs NumPy | skimage chan_vese per object s "
        "(extrapolated) | speed-up vs skimage | cell updates/s | fused kernel us/iteration | kernel GB/s | % of copy | F1 vs truth |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sk = f"{r['skimage_s']:.1f} ({r['skimage_objects']} objects)" if r["skimage_s"] else "n/a (2D only)"
        sk_ratio = f"{r['skimage_s'] * 1e3 / r['gpu_ms']:.0f}x" if r["skimage_s"] else "n/a"
        lines.append(
            f"| {r['case']} | {r['gpu_ms']:.1f} | {r['gpu_sparse_ms']:.1f} | {r['numpy_s']:.1f} ({r['numpy_iters']} it) | "
            f"{r['numpy_s'] * 1e3 / r['gpu_ms']:.0f}x | {sk} | {sk_ratio} | {r['updates']:.2e} | {r['kernel_us']:.1f} | "
            f"{r['kernel_gbs']:.0f} | {100 * r['kernel_gbs'] / r['copy_gbs']:.0f}% | {r['f1']:.3f} |"
        )
    lines += ["", "Kernels: " + ", ".join(sorted({r["kernel"] for r in rows})) + ". Cells = objects x box cells: "
              + ", ".join(f"{r['cells']:,}" for r in rows) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
