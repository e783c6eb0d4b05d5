"""Speed of ivote.segment_nuclei: GPU against our NumPy path and scikit-image's chan_vese.

Cases (full): 1024^2 with 200 nuclei and 256^3 with 300 nuclei, 500 iterations
(``tol=0``: no early stop). ``--quick``: 512^2/50 and 128^3/40.

* GPU: the whole call (set-up, 500 fused iterations, reinitialisations,
  shape-prior fits, labels), CUDA events, after a warm-up call (compilation).
* The fused kernel alone: 200 bare launches timed with CUDA events, its
  achieved bandwidth (essential traffic: phi read + write and the per-box prior
  psi read and, per valid cell, image, overlap canvas read and zeroing: 24 bytes
  a cell; the canvas atomics are not counted) against a device-to-device copy
  measured in the same run. ``--tile-sweep`` times it for a few tile shapes
  first and uses the fastest; ``--march-sweep`` the tiled kernel against the
  z-marching one (3D) or the full-width row one (2D) for a few configurations.
* A breakdown of one call into phases (CUDA events, ``_segment.PROFILE``), and
  of one call that waits for the GPU at every phase's end (``PROFILE_SYNC``: each
  phase's own wall time, where the first breakdown's host times include waits).
* NumPy path: the same call with a few iterations, per-iteration time
  extrapolated to 500 (the set-up, timed with 0 iterations, is added once).
* scikit-image: ``skimage.segmentation.chan_vese`` run on each object's box for
  500 iterations (2D only), on a subset of objects, extrapolated to all.

Usage: python benchmarks/bench_segment.py [--quick] [--gpu-only] [--tile-sweep] [--march-sweep] [--case 3D]
       [--out benchmarks/results/segment.md]
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
from ivote.segment import _cuda
from ivote.segment._cuda import CudaStepper
from ivote.segment._shape_prior import fit_poses, moment_features

ITERATIONS = 500
LAST_TIMES = []  # every call of the last gpu_time (s)


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
    print("  calls (ms): " + ", ".join(f"{1e3 * t:.1f}" for t in times), flush=True)
    LAST_TIMES[:] = times
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


def kernel_bandwidth(image, seeds, radius, spacing, launches=200, tiles=None, march=None, rows=None):
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
    stepper = CudaStepper(batch, block_length=50, use_graph=False, tiles=tiles, march=march, rows=rows)
    stepper.prior(pose)
    stepper.run(phi, 50)
    stepper.steps_only(10, start=51)
    start, end = xp.cuda.Event(), xp.cuda.Event()
    start.record()
    stepper.steps_only(launches, start=61)
    end.record()
    end.synchronize()
    per_launch = xp.cuda.get_elapsed_time(start, end) / 1e3 / launches
    valid_cells = int(batch.valid.sum())
    nbytes = 12 * stepper.cells + 12 * valid_cells  # phi read + write, psi read; image, canvas read + zeroing
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
        chan_vese(box, mu=0.2, lambda1=1.0, lambda2=1.0, max_num_iter=ITERATIONS, tol=0)
    return (time.perf_counter() - t0) / len(subset) * len(seeds)


def breakdown(image_d, centers, kwargs, sync=False):
    """{phase: (device ms, host ms)} of one call (after the warm-up of gpu_time); ``sync``: the GPU
    waited for at every phase's end (``_segment.PROFILE_SYNC``), so host ms is each phase's wall time."""
    _segment.PROFILE = []
    _segment.PROFILE_SYNC = sync
    try:
        segment_nuclei(image_d, centers, iterations=ITERATIONS, **kwargs)
        return _segment.PROFILE[0]
    finally:
        _segment.PROFILE = None
        _segment.PROFILE_SYNC = False


TILE_CANDIDATES = {2: [(1, 16, 16), (1, 8, 32), (1, 16, 32)], 3: [(4, 8, 16), (8, 8, 8), (4, 8, 8), (2, 16, 16)]}


def tile_sweep(image, centers, radius, spacing):
    """The fused kernel alone for each candidate tile shape; sets the fastest as the default."""
    ndim = image.ndim
    results = {}
    for tiles in TILE_CANDIDATES[ndim]:
        try:
            results[tiles] = kernel_bandwidth(image, centers, radius, spacing, tiles=tiles)
        except Exception as exc:
            print(f"tiles {tiles}: {type(exc).__name__}: {exc}", flush=True)
    best = min(results, key=lambda t: results[t][0])
    print(f"{ndim}D tile sweep (us/iteration): "
          + ", ".join(f"{t}: {1e6 * r[0]:.1f}" for t, r in results.items()) + f"; best {best}", flush=True)
    _cuda.TILES[ndim] = best
    return results[best], {t: 1e6 * r[0] for t, r in results.items()}


MARCH_CANDIDATES = [dict(threads=256, unroll=1, min_blocks=5, planes=None, memset=None),
                    dict(threads=256, unroll=1, min_blocks=6, planes=None, memset=None)]
ROWS_CANDIDATES = [dict(threads=256, cells=4, min_blocks=4), dict(threads=128, cells=8, min_blocks=4),
                   dict(threads=64, cells=8, min_blocks=8), dict(threads=256, cells=16, min_blocks=2),
                   dict(threads=128, cells=4, min_blocks=8)]


def kernel_sweep(image, centers, radius, spacing):
    """The fused kernel alone: the tiled kernel (TILES[ndim]) and, in a few configurations, the
    z-marching kernel (3D: threads, unroll, min blocks per SM, planes, canvas zeroed by a memset or
    in the kernel; None: auto) or the full-width row kernel (2D: threads, cells per thread, min
    blocks per SM); sets the fastest of the latter as the default."""
    ndim = image.ndim
    kind, candidates, default = (("march", MARCH_CANDIDATES, _cuda.MARCH) if ndim == 3
                                 else ("rows", ROWS_CANDIDATES, _cuda.ROWS))
    results = {"tiled " + str(_cuda.TILES[ndim]): kernel_bandwidth(image, centers, radius, spacing,
                                                                    tiles=_cuda.TILES[ndim])}
    configs = {}
    for config in candidates:
        key = f"{kind} " + "/".join("auto" if v is None else str(v) for v in config.values())
        configs[key] = config
        try:
            results[key] = kernel_bandwidth(image, centers, radius, spacing, **{kind: config})
        except Exception as exc:
            print(f"{key}: {type(exc).__name__}: {exc}", flush=True)
    best = min((k for k in configs if k in results), key=lambda k: results[k][0])
    default.update(configs[best])
    print(f"{ndim}D kernel sweep (us/iteration; {kind} " + "/".join(candidates[0]) + "): "
          + ", ".join(f"{k}: {1e6 * r[0]:.1f}" for k, r in results.items()) + f"; best {best}", flush=True)
    return {k: 1e6 * r[0] for k, r in results.items()}


def run_case(name, shape, n_nuclei, radius, numpy_iterations, skimage_objects, copy_bw, peers=True, sweep=False,
             sweep_march=False):
    image, truth, centers, spacing, _ = synthetic_nuclei(shape, radius=radius, n_nuclei=n_nuclei, overlap=0.2, seed=5)
    kwargs = dict(radius=radius, spacing=spacing, tol=0)
    image_d = to_device(image)
    sweep_us = None
    if sweep:
        _, sweep_us = tile_sweep(image, centers, radius, spacing)
    if sweep_march:
        sweep_us = kernel_sweep(image, centers, radius, spacing)
    gpu_s, labels = gpu_time(lambda: segment_nuclei(image_d, centers, iterations=ITERATIONS, **kwargs))
    all_ms = [1e3 * t for t in LAST_TIMES]
    phases = breakdown(image_d, centers, kwargs)
    print(f"{name} breakdown (device ms, host ms): "
          + ", ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in phases.items()), flush=True)
    synced = breakdown(image_d, centers, kwargs, sync=True)
    print(f"{name} breakdown, GPU waited for at each phase's end (device ms, wall ms): "
          + ", ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in synced.items()), flush=True)
    default_s, _ = gpu_time(lambda: segment_nuclei(image_d, centers, iterations=ITERATIONS, radius=radius,
                                                    spacing=spacing), repeats=3)
    default_all_ms = [1e3 * t for t in LAST_TIMES]
    f1 = match_labels(to_host(labels), truth).f1
    # the share of reinitialisations and shape fits: the same call, reinitialising 2x less often
    sparse_s, _ = gpu_time(lambda: segment_nuclei(image_d, centers, iterations=ITERATIONS, reinit_every=100, **kwargs),
                           repeats=2)
    per_launch, bandwidth, cells, kernel_name = kernel_bandwidth(image, centers, radius, spacing)
    np_s = numpy_time(image, centers, kwargs, numpy_iterations)[0] if peers else float("nan")
    sk_s = skimage_time(image, centers, radius, skimage_objects) if image.ndim == 2 and peers else None
    updates = cells * ITERATIONS / gpu_s
    return {
        "case": f"{name}: {'x'.join(map(str, shape))}, {len(centers)} nuclei, r={radius}, {ITERATIONS} it",
        "gpu_ms": 1e3 * gpu_s, "gpu_sparse_ms": 1e3 * sparse_s, "numpy_s": np_s, "numpy_iters": numpy_iterations, "skimage_s": sk_s,
        "skimage_objects": skimage_objects, "updates": updates, "cells": cells, "kernel_us": 1e6 * per_launch,
        "kernel_gbs": bandwidth / 1e9, "copy_gbs": copy_bw / 1e9, "f1": f1, "kernel": kernel_name,
        "phases": phases, "synced": synced, "default_ms": 1e3 * default_s, "sweep_us": sweep_us, "all_ms": all_ms,
        "default_all_ms": default_all_ms,
        "config": (f"march {_cuda.MARCH}" if "march" in kernel_name else f"rows {_cuda.ROWS}" if "rows" in kernel_name
                   else f"tiles {_cuda.TILES[image.ndim]}"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller cases (512^2/50, 128^3/40)")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    parser.add_argument("--gpu-only", action="store_true", help="skip the NumPy and scikit-image peers")
    parser.add_argument("--tile-sweep", action="store_true",
                        help="time the fused kernel for a few tile shapes first and use the fastest")
    parser.add_argument("--march-sweep", action="store_true",
                        help="time the tiled kernel and the z-marching (3D) or full-width row (2D) kernel in a "
                             "few configurations first, use the fastest of the latter")
    parser.add_argument("--case", choices=("2D", "3D"), default=None, help="run one case only")
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
    cases = [case for case in cases if args.case in (None, case[0])]
    for case in cases:
        try:
            rows.append(run_case(*case, copy_bw, peers=not args.gpu_only, sweep=args.tile_sweep,
                                 sweep_march=args.march_sweep))
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
    lines += ["", "Breakdown of one whole call (CUDA events between phases; device ms / host ms, summed over blocks), "
              "and the whole call with the defaults (tol=1e-3: convergence checks, early stop):", ""]
    for r in rows:
        lines.append(f"- {r['case']}: " + ", ".join(f"{k} {v[0]:.1f} / {v[1]:.1f}" for k, v in r["phases"].items())
                     + f"; defaults: {r['default_ms']:.1f} ms (min of "
                     + ", ".join(f"{t:.1f}" for t in r["default_all_ms"]) + "); tol=0 calls: "
                     + ", ".join(f"{t:.1f}" for t in r["all_ms"]) + " ms")
    lines += ["", "The same call with the GPU waited for at every phase's end (device ms / wall ms: the phase's own "
              "cost; the sum is slower than the whole call, whose host work overlaps the GPU's):", ""]
    for r in rows:
        lines.append(f"- {r['case']}: " + ", ".join(f"{k} {v[0]:.1f} / {v[1]:.1f}" for k, v in r["synced"].items())
                     + f"; sum of wall {sum(v[1] for v in r['synced'].values()):.1f} ms")
    for r in rows:
        if r["sweep_us"]:
            lines.append(f"- {r['case']}: fused kernel us/iteration by configuration: "
                         + ", ".join(f"{t}: {us:.1f}" for t, us in r["sweep_us"].items())
                         + f"; used {r['kernel']} ({r['config']})")
    lines += ["", "Kernels: " + ", ".join(sorted({r["kernel"] for r in rows})) + ". Cells = objects x box cells: "
              + ", ".join(f"{r['cells']:,}" for r in rows) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
