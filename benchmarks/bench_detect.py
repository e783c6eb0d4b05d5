"""Speed of iterative voting: GPU vs our NumPy path vs scikit-image ``blob_log``.

Cases (synthetic nuclei, see ``ivote.data.synthetic_nuclei``): 2D 1024² and
2048² with radius 12 px, 3D 256³ and 512³ with radius 8 voxels (the larger
images tile the smaller one 2x2(x2)). Whole detection is timed: blur, gradient,
voting passes, maxima, threshold, results on the host. GPU: warm-up calls for
at least a second (kernel compilation, cone tables, list sizes, pinned buffers,
and the GPU's clocks up from idle: the state of a slider being dragged), then the median wall time of ``--repeat`` calls (default
30 in 2D, 10 in 3D; each ends with a device-to-host copy, so it is
synchronised) with their minimum and maximum; peak GPU memory is the
largest ``used_bytes`` of CuPy's memory pool during a run, input image included,
for the first detection of a shape and for repeated ones (from the second
detection of a shape and setting up to 2048², the kernels replay from a CUDA
graph that keeps its buffers: the timed calls are such repeats).
The NumPy path is too slow for the big sizes: it is timed on a crop
(``--numpy-crop``) and its voxels/s rate is compared. ``blob_log`` (one sigma,
``r / sqrt(ndim)``, CPU) is timed on the full 2D images and the 256³ volume.

Usage: python benchmarks/bench_detect.py [--quick] [--out benchmarks/results/detect.md]
"""

from __future__ import annotations

import argparse
import itertools
import datetime
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ivote._backend import backend_name, default_xp, free_gpu_memory, to_device
from ivote.data import synthetic_nuclei
from ivote.detect import iterative_voting


@functools.lru_cache(maxsize=2)
def _tile(ndim: int, base: int, radius: float) -> np.ndarray:
    return synthetic_nuclei((base,) * ndim, radius=radius, seed=7).image


def make_image(ndim: int, size: int, radius: float) -> np.ndarray:
    base = 1024 if ndim == 2 else 256
    tile = _tile(ndim, base, radius)
    reps = size // base
    return np.ascontiguousarray(np.tile(tile, (reps,) * ndim)) if reps > 1 else tile


class PeakMemory:
    """Largest bytes in use in CuPy's default pool while active."""

    def __init__(self, xp):
        self.xp = xp
        self.pool = xp.get_default_memory_pool()
        self.peak = 0

    def _malloc(self, size):
        memory = self.pool.malloc(size)
        self.peak = max(self.peak, self.pool.used_bytes())
        return memory

    def __enter__(self):
        self.peak = self.pool.used_bytes()
        self.xp.cuda.set_allocator(self._malloc)
        return self

    def __exit__(self, *exc):
        self.xp.cuda.set_allocator(self.pool.malloc)


def time_call(fn, repeat: int) -> float:
    return statistics.median(time_calls(fn, repeat))


def time_calls(fn, repeat: int) -> list:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def stage_times(xp, device_image, radius, repeat=3):
    """Median GPU ms of the phases of a detection (``_cuda.detect``; CUDA events
    recorded as each phase is queued): statistics + normalisation + blur, voters
    (gradient, weights, directions), passes, maxima + close pairs; then the
    greedy scan of the maxima on the host (wall ms, after the synchronisation)."""
    from ivote.detect._cuda import detect
    from ivote.detect._plan import make_plan
    from ivote.detect._cells import _kept_cells

    ndim = device_image.ndim
    plan = make_plan(radius, (1.0,) * ndim, ndim)
    names = ("blur", "voters", "passes", "maxima", "host")
    stages = {name: [] for name in names}
    for _ in range(repeat):
        events = [xp.cuda.Event()]
        events[0].record()

        def mark(name, events=events):
            if name in names:
                event = xp.cuda.Event()
                event.record()
                events.append(event)

        found = detect(device_image, plan, 1.0, (2.0,) * ndim, phase_callback=mark)  # synchronised at the end
        queued = time.perf_counter()
        _kept_cells(found.flat, found.values, found.pairs, device_image.shape)
        done = time.perf_counter()
        gpu = [xp.cuda.get_elapsed_time(a, b) for a, b in zip(events[:-1], events[1:])]
        for name, value in zip(names, gpu + [1e3 * (done - queued)]):
            stages[name].append(value)
    return {key: statistics.median(v) for key, v in stages.items()}


def pass_profile(xp, device_image, radius, repeat=3):
    """Per-pass GPU ms (vote + turn kernels; CUDA events)."""
    from ivote._backend import ndimage_module
    from ivote.detect._cuda import run_passes
    from ivote.detect._plan import make_plan

    plan = make_plan(radius, (1.0,) * device_image.ndim, device_image.ndim)
    smoothed = device_image.astype(np.float64)
    smoothed = ndimage_module(xp).gaussian_filter((smoothed - smoothed.min()) / (smoothed.max() - smoothed.min()), 2.0)
    runs = []
    for _ in range(repeat + 1):  # the first run builds the tables
        events = [xp.cuda.Event()]
        events[0].record()

        def mark(index, n, events=events):
            event = xp.cuda.Event()
            event.record()
            events.append(event)

        run_passes(smoothed.copy(), plan, 1.0, mark)
        events[-1].synchronize()
        runs.append([xp.cuda.get_elapsed_time(a, b) for a, b in zip(events[:-1], events[1:])])
    per_pass = np.median(np.array(runs[1:]), axis=0)
    per_pass[0] = np.median([r[0] for r in runs[1:]])  # includes set-up (gradient, weights, directions)
    return plan, per_pass


def cone_cells(plan) -> list:
    """Offsets inside the cone of an interior voter, per pass (ball fraction of the cone)."""
    import math

    k = len(plan.offsets)
    if plan.ndim == 2:
        return [k * (phi / 2) / math.pi for phi in plan.cone_angles]
    return [k * (1 - math.cos(phi / 2)) / 2 for phi in plan.cone_angles]


def blob_log_time(image, radius) -> float:
    from skimage.feature import blob_log

    grey = (image - image.min()) / (image.max() - image.min())
    sigma = radius / np.sqrt(image.ndim)
    return time_call(lambda: blob_log(grey, min_sigma=sigma, max_sigma=sigma, num_sigma=1), 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1024² and 256³ only, fewer repeats")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--numpy-crop", type=int, nargs=2, default=(256, 48), metavar=("SIDE_2D", "SIDE_3D"))
    parser.add_argument("--no-blob-log", action="store_true")
    parser.add_argument("--profile", action="store_true", help="per-pass times")
    parser.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    xp = default_xp()
    if xp is np:
        print("no GPU: bench_detect.py measures the GPU path; run it on a CUDA machine", file=sys.stderr)
        return 1
    repeat_2d = args.repeat or (10 if args.quick else 30)
    repeat_3d = args.repeat or (5 if args.quick else 10)
    cases = [(2, 1024, 12.0), (3, 256, 8.0)] if args.quick else [(2, 1024, 12.0), (2, 2048, 12.0), (3, 256, 8.0), (3, 512, 8.0)]
    lines = [
        f"# Detection speed ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Device: {backend_name(xp)}. GPU: median (min-max) of {repeat_2d} (2D) / {repeat_3d} (3D) calls after 1 s of "
        f"warm-up calls; NumPy path timed on a crop "
        f"({args.numpy_crop[0]}² / {args.numpy_crop[1]}³) and compared by voxels/s; blob_log: 1 run, CPU.",
        "",
        "| case | radius | cells | passes | GPU ms, median (min-max) | blur / voters / passes / maxima GPU ms, host ms | GPU Mvox/s | peak GPU B/vox, first / repeated | NumPy Mvox/s (crop) | GPU/NumPy | blob_log s | GPU/blob_log |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    profiles = []
    for ndim, size, radius in cases:
        image = make_image(ndim, size, radius)
        device_image = to_device(image, xp)
        run = lambda: iterative_voting(device_image, radius=radius)  # noqa: E731
        warm_until = time.perf_counter() + 1.0
        for i in itertools.count():  # warm-up: kernels, tables, list sizes, pinned buffers, clocks
            found = run()
            if i >= 2 and time.perf_counter() > warm_until:
                break
        times = time_calls(run, repeat_2d if ndim == 2 else repeat_3d)
        seconds = statistics.median(times)
        stages = stage_times(xp, device_image, radius)
        free_gpu_memory()
        with PeakMemory(xp) as memory:  # the first detection of this shape: kernels one by one
            run()
        with PeakMemory(xp) as graph_memory:  # repeated: captured as a CUDA graph (2D and small 3D), replayed
            run()
            run()
        crop_side = args.numpy_crop[0] if ndim == 2 else args.numpy_crop[1]
        crop = np.ascontiguousarray(image[(slice(0, crop_side),) * ndim])
        numpy_seconds = time_call(lambda: iterative_voting(crop, radius=radius, backend="numpy"), 1)
        numpy_rate = crop.size / numpy_seconds
        rate = image.size / seconds
        if args.no_blob_log or (ndim == 3 and size > 256):
            blob, blob_ratio = "-", "-"
        else:
            b = blob_log_time(image, radius)
            blob, blob_ratio = f"{b:.2f}", f"{b / seconds:.0f}x"
        line = (
            f"| {ndim}D {size}^{ndim} | {radius:g} | {len(found.points)} | {found.n_passes} | {1e3 * seconds:.2f} "
            f"({1e3 * min(times):.2f}-{1e3 * max(times):.2f}) | "
            f"{stages['blur']:.2f} / {stages['voters']:.2f} / {stages['passes']:.2f} / {stages['maxima']:.2f}, "
            f"{stages['host']:.2f} | "
            f"{rate / 1e6:.1f} | {memory.peak / image.size:.1f} / {graph_memory.peak / image.size:.1f} | {numpy_rate / 1e6:.3f} | {rate / numpy_rate:.0f}x | "
            f"{blob} | {blob_ratio} |"
        )
        lines.append(line)
        print(line, flush=True)
        if args.profile:
            plan, table_ms = pass_profile(xp, device_image, radius)
            cells = cone_cells(plan)
            visits = sum(c * (1 if i == plan.n_passes - 1 else 2) for i, c in enumerate(cells)) * image.size
            profiles.append(
                f"| {ndim}D {size}^{ndim} | "
                + " / ".join(f"{c:.0f}" for c in cells)
                + " | " + " / ".join(f"{t:.2f}" for t in table_ms) + f" | {table_ms.sum():.2f}"
                + f" | {visits / (table_ms.sum() * 1e-3) / 1e9:.0f} |"
            )
            print(profiles[-1], flush=True)
        del device_image
        free_gpu_memory()
    if profiles:
        lines += [
            "",
            "Voting passes, GPU ms per pass (CUDA events; vote + turn kernels, pass 1 includes the voter set-up). "
            "Cone-cell visits: cone cells of an interior voter x pixels x (2 for vote + turn, 1 in the last pass), "
            "an upper bound (not every pixel votes) on the atomic adds plus gathers per second:",
            "",
            "| case | cone cells per voter, by pass | ms, by pass | passes ms | G cone-cell visits/s |",
            "| --- | --- | --- | --- | --- |",
            *profiles,
        ]
        print("\n".join(lines[-len(profiles) - 5:]), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
