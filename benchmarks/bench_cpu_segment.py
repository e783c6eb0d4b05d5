"""Speed of ivote.segment_nuclei on the CPU: the Numba kernels against our NumPy path and
scikit-image's watershed, in one run, with the thread count printed.

Cases: 1024^2 with 200 nuclei (radius 20 px, 500 iterations, ``tol=0``: no early stop, as
``bench_segment.py``) and the 3D sample of ``ivote demo`` on the CPU (``sample_3d((24, 96, 96))``,
the demo's defaults). ``--quick``: 512^2 with 50 nuclei.

* Numba: one warm-up call (loads the on-disk cache, or compiles), then the best of
  ``--repeats`` calls, on all threads and on one (the scaling); a breakdown of one call into
  phases (``_segment.PROFILE``, wall ms). ``--compile`` also times the first call in a fresh
  interpreter with an empty cache directory (the compile from nothing) and with the cache,
  counting Numba's compilations (none should happen with the cache on disk); the shape
  priors, trained once per machine and kept beside Numba's cache (``ivote._disk_cache``), are
  timed apart. ``--compile-only``: just that.
* NumPy path (``IVOTE_BACKEND=numpy``): a few iterations, extrapolated to all of them (the
  set-up, timed with 0 iterations, added once), as ``bench_segment.py`` does.
* scikit-image: ``skimage.segmentation.watershed`` of the inverted distance transform of an
  Otsu mask, markers at the same seeds (the classical peer; 2D and 3D).

Timings on a shared machine are noisy: the table gives the best of the repeats and the
process CPU time of the one-thread run, which other processes disturb less.

Usage: python benchmarks/bench_cpu_segment.py [--quick] [--repeats N] [--compile [--compile-repeats N]]
       [--compile-only] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ivote._backend import backend_name, cpu_threads
from ivote.data import sample_3d, synthetic_nuclei
from ivote.metrics import match_labels
from ivote.segment import _segment, segment_nuclei


def _with_backend(name, fn):
    previous = os.environ.get("IVOTE_BACKEND")
    os.environ["IVOTE_BACKEND"] = name
    try:
        return fn()
    finally:
        if previous is None:
            os.environ.pop("IVOTE_BACKEND")
        else:
            os.environ["IVOTE_BACKEND"] = previous


def numba_times(image, seeds, kwargs, repeats):
    """Best wall time of ``repeats`` calls after a warm-up, its phases, and the labels."""
    import numba

    run = lambda: segment_nuclei(image, seeds, **kwargs)  # noqa: E731
    _with_backend("numba", run)
    best, labels = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        labels = _with_backend("numba", run)
        best = min(best, time.perf_counter() - t0)
    _segment.PROFILE = []
    try:
        _with_backend("numba", run)
        phases = _segment.PROFILE[0]
    finally:
        _segment.PROFILE = None
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        _with_backend("numba", run)
        one_wall, one_cpu = time.perf_counter() - w0, time.process_time() - c0
    finally:
        numba.set_num_threads(threads)
    return best, phases, one_wall, one_cpu, labels


def numpy_time(image, seeds, kwargs, iterations, few):
    """The NumPy reference's time for ``iterations``, extrapolated from ``few``."""
    def call(n):
        return _with_backend("numpy", lambda: segment_nuclei(image, seeds, **dict(kwargs, iterations=n)))

    call(0)
    t0 = time.perf_counter()
    call(0)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    call(few)
    per_iteration = max(time.perf_counter() - t0 - setup, 1e-9) / few
    return setup + per_iteration * iterations


def watershed_time(image, seeds):
    from scipy import ndimage as ndi
    from skimage.filters import threshold_otsu
    from skimage.segmentation import watershed

    def run():
        mask = image > threshold_otsu(image)
        distance = ndi.distance_transform_edt(mask)
        markers = np.zeros(image.shape, dtype=np.int32)
        index = tuple(np.clip(np.rint(seeds).astype(int), 0, np.array(image.shape) - 1).T)
        markers[index] = np.arange(1, len(seeds) + 1)
        return watershed(-distance, markers, mask=mask)

    run()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        labels = run()
        best = min(best, time.perf_counter() - t0)
    return best, labels


_FIRST_CALL = """\
import time
t0 = time.perf_counter()
from numba.core import event
compiles = []
class Count(event.Listener):
    def on_start(self, e):
        compiles.append(e.data["dispatcher"].py_func.__name__)
    def on_end(self, e):
        pass
event.register("numba:compile", Count())
from ivote.data import synthetic_nuclei
from ivote.segment import segment_nuclei
from ivote.segment._shape_prior import train_shape_prior
w, c = time.perf_counter(), time.process_time()
for ndim in (2, 3):
    train_shape_prior(ndim)
prior_wall, prior_cpu = time.perf_counter() - w, time.process_time() - c
for shape in ((48, 48), (12, 32, 32)):
    s = synthetic_nuclei(shape, radius=5, seed=1)
    segment_nuclei(s.image, s.centers, radius=5, iterations=3, reinit_every=2)
import resource
used = resource.getrusage(resource.RUSAGE_CHILDREN)  # helper processes compiling kernels (ivote._compile)
print(time.perf_counter() - t0, time.process_time() + used.ru_utime + used.ru_stime, len(compiles), prior_wall,
      prior_cpu)
"""


def compile_times(repeats):
    """First call of a small 2D and a small 3D segmentation (3 iterations, a reinitialisation
    after 2, so every kernel runs) in a fresh interpreter, imports included: with an empty
    Numba cache directory and an empty ivote cache (the shape priors), then again with the
    caches it left. ``repeats`` fresh cache directories; per run (wall s, CPU s, Numba
    compilations, shape priors' wall s, their CPU s)."""
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache, IVOTE_CACHE_DIR=os.path.join(cache, "ivote"),
                       IVOTE_BACKEND="numba")
            for runs in (cold, warm):
                result = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True,
                                        check=True)
                wall, cpu, count, prior_wall, prior_cpu = result.stdout.split()
                runs.append((float(wall), float(cpu), int(count), float(prior_wall), float(prior_cpu)))
    return cold, warm


def compile_lines(cold, warm):
    """The markdown of :func:`compile_times`."""
    lines = ["First call in a fresh interpreter (2D and 3D, every kernel, imports included), "
             f"{len(cold)} fresh cache directories: wall s / CPU s (the helper processes that compile beside it, "
             "ivote._compile, included) / Numba compilations in the process itself (shape priors' wall s / "
             "CPU s, included)", "",
             "| caches | " + " | ".join(f"run {i + 1}" for i in range(len(cold))) + " |",
             "|---|" + "---|" * len(cold)]
    for name, runs in (("empty (compile, train)", cold), ("on disk", warm)):
        lines.append(f"| {name} | " + " | ".join(f"{w:.1f} / {c:.1f} / {n} ({pw:.2f} / {pc:.2f})"
                                                 for w, c, n, pw, pc in runs) + " |")
    # compilation: empty minus on disk, less the shape priors' training (their time in the cold run
    # minus the cached read in the warm one), best runs
    best = [min(r[i] - r[i + 3] for r in cold) - min(r[i] - r[i + 3] for r in warm) for i in (0, 1)]
    prior = [min(r[i + 3] for r in cold) - min(r[i + 3] for r in warm) for i in (0, 1)]
    return lines + ["", f"Compilation (empty minus on disk, shape priors apart, best runs): {best[0]:.1f} s wall, "
                    f"{best[1]:.1f} s CPU; shape priors' training (2D + 3D, once per machine): {prior[0]:.2f} s wall, "
                    f"{prior[1]:.2f} s CPU; compilations with the caches on disk: {max(r[2] for r in warm)} "
                    "(0: nothing recompiled)."]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="512^2 with 50 nuclei instead of 1024^2 with 200")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also time the first call from an empty cache")
    parser.add_argument("--compile-repeats", type=int, default=2, help="fresh cache directories for --compile")
    parser.add_argument("--compile-only", action="store_true", help="only the first-call timing of --compile")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args(argv)
    backend = _with_backend("numba", backend_name)
    print(f"backend: {backend}; CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores", flush=True)
    if args.compile_only:
        now = datetime.datetime.now(datetime.timezone.utc)
        text = "\n".join([f"# bench_cpu_segment --compile-only ({now:%Y-%m-%d %H:%M} UTC)", "", f"{backend}; "
                          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}", "",
                          *compile_lines(*compile_times(args.compile_repeats))]) + "\n"
        print(text)
        if args.out:
            Path(args.out).write_text(text)
        return
    shape, n_nuclei = ((512, 512), 50) if args.quick else ((1024, 1024), 200)
    image, truth, centers, spacing, radius = synthetic_nuclei(shape, radius=20.0, n_nuclei=n_nuclei, overlap=0.2,
                                                              seed=5)
    demo = sample_3d((24, 96, 96))
    cases = [
        (f"2D {shape[0]}x{shape[1]}, {len(centers)} nuclei, r=20, 500 it (tol=0)", image, truth, centers,
         dict(radius=radius, spacing=spacing, iterations=500, tol=0), 500, 5),
        (f"3D demo sample {'x'.join(map(str, demo.image.shape))}, {len(demo.centers)} nuclei, defaults", demo.image,
         demo.labels, demo.centers, dict(radius=demo.radius, spacing=demo.spacing), 300, 3),
    ]
    rows = []
    for name, img, truth_labels, seeds, kwargs, iterations, few in cases:
        print(f"case {name}", flush=True)
        best, phases, one_wall, one_cpu, labels = numba_times(img, seeds, kwargs, args.repeats)
        print(f"  numba {best:.2f} s; 1 thread {one_wall:.2f} s wall, {one_cpu:.2f} s CPU", flush=True)
        numpy_s = numpy_time(img, seeds, kwargs, iterations, few)
        print(f"  numpy {numpy_s:.1f} s (extrapolated from {few} it)", flush=True)
        ws_s, ws_labels = watershed_time(img, seeds)
        rows.append(dict(name=name, numba=best, one_wall=one_wall, one_cpu=one_cpu, numpy=numpy_s, few=few,
                         watershed=ws_s, f1=match_labels(labels, truth_labels).f1,
                         ws_f1=match_labels(ws_labels, truth_labels).f1, phases=phases))
    compiled = compile_times(args.compile_repeats) if args.compile else None
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        f"# bench_cpu_segment ({now:%Y-%m-%d %H:%M} UTC)", "",
        f"{backend}; {os.cpu_count()} cores; best of {args.repeats} calls after a warm-up", "",
        "| case | Numba s | Numba, 1 thread s (CPU s) | NumPy s (extrapolated) | speed-up vs NumPy | "
        "skimage watershed s | F1@0.5 ours / watershed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['numba']:.2f} | {r['one_wall']:.2f} ({r['one_cpu']:.2f}) | "
                     f"{r['numpy']:.1f} ({r['few']} it) | {r['numpy'] / r['numba']:.0f}x | {r['watershed']:.3f} | "
                     f"{r['f1']:.3f} / {r['ws_f1']:.3f} |")
    lines += ["", "Phases of one call (wall ms, summed over blocks):", ""]
    for r in rows:
        lines.append(f"- {r['name']}: " + ", ".join(f"{k} {v[1]:.0f}" for k, v in r["phases"].items()))
    if compiled:
        lines += ["", *compile_lines(*compiled)]
    lines += ["", f"Threads: {cpu_threads()} (NUMBA_NUM_THREADS); timings on a shared machine are noisy."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
