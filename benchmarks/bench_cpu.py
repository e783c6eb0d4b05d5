"""Speed on the CPU: the Numba backend against scikit-image and our NumPy path, in one run.

Cases (synthetic nuclei, ``ivote.data.synthetic_nuclei``):

* detection 2D 1024², radius 12 px: Numba (median of ``--repeat`` after a
  warm-up call), ``skimage.feature.blob_log`` with the same radius (one sigma,
  r / sqrt(2), as ``bench_detect.py``; its runs alternate with ours, so a shared
  host's drifting speed hits both alike) and our NumPy path (one run);
* detection 3D 256³, radius 8 voxels: Numba (one run after a warm-up on a
  small volume), NumPy on a ``--numpy-crop``³ crop compared by voxels/s;
* "slider release to points" at 1024² (0.5 µm/px, radius 6 µm = 12 px):
  ``_detect_logic.run_request`` on the whole plane (the preview's budget with
  Numba) plus the Points layer's data, i.e. the widget's compute without Qt;
* segmentation 1024², 200 nuclei, 500 iterations: ``ivote.segment_nuclei`` seeded
  with the true centres, against ``skimage.segmentation.watershed`` seeded with
  the same centres on the image's gradient;
* ``ivote demo`` (a subprocess, wall time);
* first-call compile time: a detection in a fresh process with an empty
  temporary ``NUMBA_CACHE_DIR`` (2D, then 3D), and again with that cache warm
  (wall; the CPU time of the 2D one in the notes, and that of the helper processes
  that compile kernels beside it, ``ivote._compile``);
* thread scaling: the 2D detection with ``numba.set_num_threads(k)``, k = 1 .. all.

Prints the thread count and a table. Timings are wall clock; on a machine
shared with other jobs they are noisy (the load average is printed; the
notes give the process's CPU time too, which moves less).

Usage: python benchmarks/bench_cpu.py [--quick] [--out benchmarks/results/cpu.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_FIRST_CALL = """
import resource, time, sys
t0 = time.perf_counter()
import ivote
from ivote.data import synthetic_nuclei
t1 = time.perf_counter()
for shape, radius in (((96, 96), 6.0), ((24, 40, 40), 4.0)):
    image = synthetic_nuclei(shape, radius=radius, seed=1).image
    t, c = time.perf_counter(), time.process_time()
    ivote.iterative_voting(image, radius=radius, backend="numba")
    print(f"{len(shape)}d {time.perf_counter() - t:.3f}")
    print(f"{len(shape)}d_cpu {time.process_time() - c:.3f}")
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the helper processes compiling kernels (ivote._compile)
    print(f"{len(shape)}d_helpers_cpu {used.ru_utime + used.ru_stime:.3f}")
print(f"import {t1 - t0:.3f}")
"""


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _timed(call, repeat=1, warm_up=False):
    """Median, min and max wall time of ``repeat`` calls, and the last result.
    The median CPU time of the process (all threads) is left in ``_timed.cpu``:
    on a shared machine it moves less than the wall time."""
    if warm_up:
        call()
    times, cpu, result = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        result = call()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    _timed.cpu = statistics.median(cpu)
    _timed.last = times[-1]
    return statistics.median(times), min(times), max(times), result


def _first_calls(cache_dir: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "IVOTE_BACKEND": "numba"}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    values = dict(line.split() for line in out.stdout.splitlines() if line.strip())
    warnings = [line for line in out.stderr.splitlines() if "warn" in line.lower()]
    return {key: float(value) for key, value in values.items()} | {"process": wall, "warnings": len(warnings)}


def _fmt(seconds) -> str:
    return "n/a" if seconds is None else (f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller 3D volume (128³), no NumPy 2D peer, no demo")
    parser.add_argument("--numpy-crop", type=int, default=64, help="side of the 3D crop the NumPy path is timed on")
    parser.add_argument("--skip-segment", action="store_true")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--out", help="also write the table (markdown) here")
    args = parser.parse_args(argv)

    import numba
    from skimage.feature import blob_log
    from skimage.filters import sobel
    from skimage.segmentation import watershed

    import ivote
    from ivote._backend import backend_name, cpu_threads, use_numba
    from ivote.data import synthetic_nuclei
    from ivote.metrics import match_points
    from ivote.napari import _detect_logic as logic

    if not use_numba():
        print("the Numba backend is not in use (IVOTE_BACKEND?); nothing to measure", file=sys.stderr)
        return 1
    threads = cpu_threads()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        "# CPU speed: the Numba backend",
        "",
        f"machine: {_cpu_name()}, {os.cpu_count()} logical CPUs; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, NumPy {np.__version__}, Numba {numba.__version__}",
        f"backend: {backend_name()}; threads: {threads}; date: {date}; load average at start (1/5/15 min): {_load()}",
        "",
        "| case | goal | ours (s) | peer | peer (s) | peer / ours | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(header), flush=True)
    rows = []

    def row(case, goal, ours, peer, peer_s, notes=""):
        ratio = f"{peer_s / ours:.2f}x" if isinstance(peer_s, float) and ours else "n/a"
        line = (case, goal, _fmt(ours), peer, _fmt(peer_s) if isinstance(peer_s, float) else peer_s, ratio, notes)
        rows.append(line)
        print(f"| {' | '.join(line)} |", flush=True)

    # first-call compile time (fresh processes, an empty then a warm cache)
    with tempfile.TemporaryDirectory(prefix="ivote-numba-cache-") as cache:
        cold = _first_calls(cache)
        warm = _first_calls(cache)
    row("first 2D detection, empty Numba cache (compile)", "<= 5 s", cold["2d"], "same, cache warm", warm["2d"],
        f"CPU {cold['2d_cpu']:.2f} s, helper processes {cold['2d_helpers_cpu']:.2f} s (ivote._compile); "
        f"import {cold['import']:.2f} s; warnings on stderr: {cold['warnings']} / "
        f"{warm['warnings']}")
    row("first 3D detection after it, empty cache (compile)", "<= 5 s", cold["3d"], "same, cache warm", warm["3d"],
        f"whole process {cold['process']:.1f} s cold, {warm['process']:.1f} s warm")

    # detection 2D 1024², radius 12
    sample2 = synthetic_nuclei((1024, 1024), radius=12.0, seed=21)
    image2 = sample2.image
    grey = (image2 - image2.min()) / (image2.max() - image2.min())
    sigma = 12.0 / np.sqrt(2)
    ours_times, peer_times, cpus, found = [], [], [], None
    blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1)  # warm-up, as ours
    for _ in range(args.repeat):  # alternating: a shared host's speed drifts between runs, both see the same
        _, _, _, found = _timed(lambda: ivote.iterative_voting(image2, radius=12.0, backend="numba"), warm_up=found is None)
        ours_times.append(_timed.last)
        cpus.append(_timed.cpu)
        _timed(lambda: blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1))
        peer_times.append(_timed.last)
    med, low, high = statistics.median(ours_times), min(ours_times), max(ours_times)
    blob, cpu2 = statistics.median(peer_times), statistics.median(cpus)
    pair = statistics.median(p / o for p, o in zip(peer_times, ours_times))
    f1 = match_points(found.points, sample2.centers, tolerance=6.0).f1
    row("detect 2D 1024², r 12 px", "<= 0.25 s, < blob_log", med, "skimage blob_log (1 sigma)", blob,
        f"median of {args.repeat} ({low:.3f}-{high:.3f}), CPU {cpu2:.3f} s; runs alternating with blob_log's, "
        f"median of the pairs' ratios {pair:.2f}x; {len(found.points)} cells, F1 {f1:.3f}")
    two_d = med
    if not args.quick:
        numpy_time, _, _, numpy_found = _timed(lambda: ivote.iterative_voting(image2, radius=12.0, backend="numpy"))
        same = np.array_equal(numpy_found.points, found.points)
        row("detect 2D 1024², r 12 px", "", med, "our NumPy path", numpy_time,
            "same points" if same else "POINTS DIFFER")

    # detection 3D 256³, radius 8
    side = 128 if args.quick else 256
    sample3 = synthetic_nuclei((side,) * 3, radius=8.0, seed=22)
    ivote.iterative_voting(sample3.image[:32, :48, :48], radius=8.0, backend="numba")  # warm-up (compile, tables)
    med3, _, _, found3 = _timed(lambda: ivote.iterative_voting(sample3.image, radius=8.0, backend="numba"))
    cpu3 = _timed.cpu
    f13 = match_points(found3.points, sample3.centers, tolerance=4.0).f1
    crop = sample3.image[: args.numpy_crop, : args.numpy_crop, : args.numpy_crop]
    crop_numba, *_ = _timed(lambda: ivote.iterative_voting(crop, radius=8.0, backend="numba"))
    crop_numpy, _, _, crop_found = _timed(lambda: ivote.iterative_voting(crop, radius=8.0, backend="numpy"))
    same = np.array_equal(crop_found.points, ivote.iterative_voting(crop, radius=8.0, backend="numba").points)
    row(f"detect 3D {side}³, r 8 voxels", "<= 10 s", med3, f"our NumPy path, {args.numpy_crop}³ crop, scaled by voxels",
        crop_numpy * sample3.image.size / crop.size,
        f"one run, CPU {cpu3:.1f} s; {len(found3.points)} cells, F1 {f13:.3f}; "
        f"crop: Numba {crop_numba:.2f} s, NumPy {crop_numpy:.1f} s, "
        + ("same points" if same else "POINTS DIFFER"))

    # slider release to points, 1024² at 0.5 um/px, radius 6 um
    tile = synthetic_nuclei((1024, 1024), spacing=(0.5, 0.5), radius=6.0, overlap=0.2, noise=0.05, seed=11)
    geometry = logic.image_geometry(tile.image.shape, scale=tile.spacing)
    request = logic.DetectRequest(tile.image, 6.0, tile.spacing, preview=True)

    def release():  # what the widget's worker and its finished handler compute
        result = logic.run_request(request)
        points, scores, _ = result.points("otsu")
        return logic.points_layer_state(geometry, 6.0, points, scores, image_name="tile",
                                        score_range=logic.score_range(result))

    med_r, low_r, high_r, _ = _timed(release, args.repeat, warm_up=True)
    cpu_r = _timed.cpu
    budget = logic.preview_plane_budget()
    row("slider release to points, 1024² (compute + layer data, no Qt)", "<= 0.3 s", med_r, "n/a", "n/a",
        f"median of {args.repeat} ({low_r:.3f}-{high_r:.3f}), CPU {cpu_r:.3f} s; preview budget: "
        + ("whole plane" if budget is None else f"{budget} px"))

    # segmentation 1024², 200 nuclei, 500 iterations
    if not args.skip_segment:
        cells = synthetic_nuclei((1024, 1024), radius=12.0, n_nuclei=200, seed=23)
        seeds = cells.centers
        med_s, _, _, labels = _timed(lambda: ivote.segment_nuclei(cells.image, seeds, radius=12.0, iterations=500),
                                     warm_up=True)  # the first call loads (or compiles) the kernels
        markers = np.zeros(cells.image.shape, dtype=np.int32)
        rounded = np.clip(np.round(seeds).astype(int), 0, np.array(cells.image.shape) - 1)
        markers[tuple(rounded.T)] = np.arange(1, len(seeds) + 1)
        edges = sobel(cells.image.astype(np.float64))
        ws, *_ = _timed(lambda: watershed(edges, markers, mask=cells.image > np.percentile(cells.image, 50)), 3)
        row("segment 2D 1024², 200 nuclei, 500 iterations", "<= 2 s", med_s, "skimage watershed (same seeds)", ws,
            f"one run after a warm-up call; {len(seeds)} seeds, {len(np.unique(labels)) - 1} labels")

    # ivote demo
    if not (args.quick or args.skip_demo):
        with tempfile.TemporaryDirectory(prefix="ivote-demo-") as out:
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "ivote.cli", "demo", "--out", out], env=env,
                                  capture_output=True, text=True)
            demo = time.perf_counter() - t0
        row("ivote demo (subprocess, wall)", "<= 20 s", demo, "n/a", "n/a",
            "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")

    # thread scaling, 2D 1024²
    scaling = []
    for k in range(1, threads + 1):
        numba.set_num_threads(k)
        t, *_ = _timed(lambda: ivote.iterative_voting(image2, radius=12.0, backend="numba"), 3, warm_up=True)
        scaling.append((k, t))
    numba.set_num_threads(threads)
    text_scaling = ", ".join(f"{k}: {t:.3f} s" for k, t in scaling)
    row("detect 2D 1024², threads 1 .. all", "", scaling[-1][1], "1 thread", scaling[0][1], text_scaling)

    footer = ["", f"load average at end (1/5/15 min): {_load()}; 2D detection median {two_d:.3f} s"]
    print("\n".join(footer))
    if args.out:
        lines = header + [f"| {' | '.join(r)} |" for r in rows] + footer
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
