"""Chunked labelling of a mask on disk (Zarr) against the in-memory path; with
``--detect``, chunked detection of a nuclei volume on disk against the in-memory detection.

    python benchmarks/bench_scale.py [--sizes 256 384 512] [--chunk 128] [--dir DIR] [--out results.md]
    python benchmarks/bench_scale.py --detect --size 1024 --gpus 1 [--radius 6] [--chunks 512 256] [--dir DIR]
    python benchmarks/bench_scale.py --halo-study [--backend numba] [--out results.md]

Detection (``--detect``, see ``detect_main``): a volume of N³ blurred, noisy balls
(nuclei of radius 0.6-1 x RADIUS on a jittered grid) is written to ``DIR/nuclei_N.zarr``
(uncompressed, chunks of 128³) by parallel processes. Then, each in a fresh
process after a warm-up (kernel compilation excluded): ``in-memory`` reads the
volume (timed apart) and runs ``ivote.iterative_voting``; ``chunked`` runs
``ivote.distributed.detect_chunked`` on the Zarr array (reads included): its
default blocks (the fewest voxels within the GPU memory limit; one block when
the volume fits), each ``--chunks`` size, and with ``--gpus N > 1`` a local
cluster of N GPU workers. Printed: seconds, Mvoxels/s, the ratio to the
in-memory detection, peak host memory (this process and its workers), peak GPU
memory (device-wide, above the idle baseline), cells, and whether every
candidate, score and contrast equals the in-memory result; under each chunked
row, the wall seconds of each pass over the blocks and the reads and GPU time
summed over the tasks' threads. ``--every-voter`` also runs each ``--chunks``
size with every voter of the halo in every pass (the engine without
``ivote.detect._reach``'s per-pass boxes), as a peer. Goals of issue 14:
chunked >= 80% of the in-memory throughput on a volume that fits (one GPU),
>= 1.8x from one GPU to two.

For each cube size N, a mask of touching balls (radius 6, on a jittered grid so
that many objects cross block seams) is written to ``DIR/mask_N.zarr`` block by
block. Then, each in a fresh process so its peak memory is its own:

- ``chunked``: ``ivote.distributed.label_chunked`` from Zarr to Zarr, Dask
  threads, one block per task;
- ``in-memory``: the whole mask read into memory, ``ivote.label`` (SciPy, or
  cupyx on a GPU), the labels written to Zarr.

Printed: Mvoxels/s, the ratio chunked / in-memory, the peak resident host
memory of each process (ru_maxrss), and whether both give the same count.
The goal of issue 14: host memory flat in the volume's size for the chunked
path, throughput >= 80% of the in-memory path on a volume that fits.

    python benchmarks/bench_scale.py --segment [--size 256] [--chunk 256] [--gpus 1] [--iterations 100] [--hops 2]

Segmentation (``segment_main``): a synthetic volume of nuclei (a 64³ tile of
``ivote.data.synthetic_nuclei`` with about 30 nuclei of radius <= 6, repeated) and
its seeds written to ``DIR/seg_N.zarr``; then, each in a fresh process, the
in-memory ``segment_nuclei`` (labels written to Zarr) and the chunked
``segment_chunked`` (Zarr to Zarr; one block at a time with ``--gpus 1``, a
``dask-cuda`` cluster of N workers with ``--gpus N``). Printed: Mvoxels/s,
chunked / in-memory, peak host memory (ru_maxrss), peak GPU memory (CuPy's pool,
which keeps freed blocks, so its size is the peak), objects, and the voxels
whose labels differ.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date

import numpy as np

RADIUS = 6


def _balls_block(origin, shape, size, seed=0):
    """The mask of balls on a jittered grid (spacing 2 * RADIUS) inside one block."""
    step = 2 * RADIUS
    rng_cells = math.ceil(size / step)
    lo = [max(0, (o - RADIUS - 2) // step) for o in origin]
    hi = [min(rng_cells, (o + s + RADIUS + 2) // step + 1) for o, s in zip(origin, shape)]
    grids = np.ogrid[tuple(slice(o, o + s) for o, s in zip(origin, shape))]
    block = np.zeros(shape, bool)
    for cell in np.ndindex(*[h - l for l, h in zip(lo, hi)]):
        index = tuple(c + l for c, l in zip(cell, lo))
        rng = np.random.default_rng(hash((seed,) + index) & 0xFFFFFFFF)
        if rng.random() < 0.35:  # leave gaps, so there are many components
            continue
        centre = [i * step + RADIUS + rng.uniform(-2, 2) for i in index]
        r = RADIUS * rng.uniform(0.8, 1.15)
        # only the ball's bounding box inside the block is touched
        box = tuple(slice(max(0, math.floor(c - r) - o), max(0, min(s, math.ceil(c + r) + 1 - o)))
                    for c, o, s in zip(centre, origin, shape))
        if any(b.start >= b.stop for b in box):
            continue
        sub = [g[tuple(b if k == axis else slice(None) for k, b in enumerate(box))] for axis, g in enumerate(grids)]
        block[box] |= sum((g - c) ** 2 for g, c in zip(sub, centre)) <= r * r
    return block


def write_mask(path, size: int, chunk: int):
    import zarr

    if os.path.exists(os.path.join(path, "zarr.json")) or os.path.exists(os.path.join(path, ".zarray")):
        return zarr.open_array(path, mode="r")
    mask = zarr.open_array(path, mode="w", shape=(size,) * 3, chunks=(chunk,) * 3, dtype=bool)
    for origin in np.ndindex(*(math.ceil(size / chunk),) * 3):
        start = [o * chunk for o in origin]
        shape = [min(chunk, size - s) for s in start]
        mask[tuple(slice(s, s + n) for s, n in zip(start, shape))] = _balls_block(start, shape, size)
    return mask


def _child(mode: str, path: str, out: str, chunk: int) -> dict:
    import zarr

    from ivote import label
    from ivote.distributed import label_chunked

    mask = zarr.open_array(path, mode="r")
    labels = zarr.open_array(out, mode="w", shape=mask.shape, chunks=(chunk,) * 3, dtype="uint32")
    # warm up: the first GPU call of a fresh machine compiles its kernels (seconds); not timed
    label_chunked(np.ones((4, 4, 4), bool), chunks=2, scheduler="sync")
    label(np.ones((4, 4, 4), bool))
    start = time.perf_counter()
    if mode == "chunked":
        result = label_chunked(mask, out=labels, scheduler="threads")
        count = result.count
    else:
        whole, count = label(mask[:])
        labels[:] = whole.astype(np.uint32)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    return {"seconds": seconds, "count": int(count), "peak_mib": peak}


def _run_child(mode, path, out, chunk) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, path, out, str(chunk)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


SEG_TILE = 64
SEG_RADIUS = 6.0


def write_segment_volume(path: str, size: int, chunk: int):
    """The image (float32 Zarr, chunks of ``chunk``) and seeds (``seeds.npy``) of a cube of
    ``size`` made of one synthetic 64³ tile repeated; cached in ``path``."""
    import zarr

    from ivote.data import synthetic_nuclei

    seeds_path = os.path.join(path, "seeds.npy")
    if os.path.exists(seeds_path):
        return zarr.open_array(os.path.join(path, "image.zarr"), mode="r"), np.load(seeds_path)
    tile = synthetic_nuclei((SEG_TILE,) * 3, radius=SEG_RADIUS, n_nuclei=30, seed=11)
    image = zarr.open_array(os.path.join(path, "image.zarr"), mode="w", shape=(size,) * 3, chunks=(chunk,) * 3,
                            dtype="float32")
    reps = math.ceil(size / SEG_TILE)
    big_tile = np.tile(tile.image, (math.ceil(chunk / SEG_TILE) + 1,) * 3)
    for origin in np.ndindex(*(math.ceil(size / chunk),) * 3):
        start = [o * chunk for o in origin]
        stop = [min(s + chunk, size) for s in start]
        offset = [s % SEG_TILE for s in start]
        image[tuple(slice(a, b) for a, b in zip(start, stop))] = big_tile[
            tuple(slice(o, o + b - a) for o, a, b in zip(offset, start, stop))]
    shifts = np.stack(np.meshgrid(*[np.arange(reps) * SEG_TILE] * 3, indexing="ij"), -1).reshape(-1, 3)
    seeds = (tile.centers[None] + shifts[:, None]).reshape(-1, 3)
    seeds = seeds[np.all(np.rint(seeds) < size, axis=1)]
    np.save(seeds_path, seeds)
    return image, seeds


def _segment_child(mode: str, path: str, out: str, chunk: int, gpus: int, iterations: int, hops: int) -> dict:
    import zarr

    from ivote import segment_nuclei
    from ivote._backend import _cupy, to_host

    image = zarr.open_array(os.path.join(path, "image.zarr"), mode="r")
    seeds = np.load(os.path.join(path, "seeds.npy"))
    labels = zarr.open_array(out, mode="w", shape=image.shape, chunks=(chunk,) * 3, dtype="int32")
    options = dict(iterations=iterations)
    from ivote.data import synthetic_nuclei

    warm = synthetic_nuclei((16, 48, 48), radius=SEG_RADIUS, seed=1)  # compile the kernels before the timer
    segment_nuclei(warm.image, warm.centers, radius=SEG_RADIUS, iterations=2 * 50)
    start = time.perf_counter()
    if mode.startswith("chunked"):
        options["hops"] = hops
        if mode == "chunked-blocks":  # the given blocks; "chunked": the engine's default (one when it fits)
            options["chunks"] = chunk
        from ivote.distributed import cluster, segment_chunked

        if gpus > 1:
            with cluster("local", gpus=gpus):
                result = segment_chunked(image, seeds, SEG_RADIUS, out=labels, **options)
        else:
            result = segment_chunked(image, seeds, SEG_RADIUS, out=labels, scheduler="sync", **options)
        count, passes = result.count, result.passes
    else:
        whole = to_host(segment_nuclei(image[:], seeds, radius=SEG_RADIUS, **options))
        labels[:] = whole
        count, passes = len(np.unique(whole)) - 1, 1
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cupy = _cupy()
    gpu_peak = cupy.get_default_memory_pool().total_bytes() / 2**20 if cupy is not None else 0.0
    return {"seconds": seconds, "count": int(count), "peak_mib": peak, "gpu_mib": gpu_peak, "passes": passes}


def _differing_voxels(a_path: str, b_path: str, chunk: int) -> int:
    import zarr

    a, b = zarr.open_array(a_path, mode="r"), zarr.open_array(b_path, mode="r")
    return sum(int((a[s] != b[s]).sum()) for s in (tuple(slice(o * chunk, (o + 1) * chunk) for o in origin)
                                                   for origin in np.ndindex(*[math.ceil(n / chunk) for n in a.shape])))


def segment_main(args) -> int:
    from ivote._backend import backend_name

    folder = args.dir or tempfile.mkdtemp(prefix="ivote-scale-")
    size = args.size
    path = os.path.join(folder, f"seg_{size}")
    os.makedirs(path, exist_ok=True)
    _, seeds = write_segment_volume(path, size, args.chunk)
    print(f"bench_scale --segment {date.today()} on {platform.node()}, {os.cpu_count()} CPUs, {backend_name()}; "
          f"{size}³ voxels, {len(seeds)} seeds, radius {SEG_RADIUS:g}, {args.iterations} iterations, "
          f"chunked: default blocks and blocks of {args.chunk}³, hops {args.hops}, {args.gpus} GPU(s)")
    header = "| volume | path | s | Mvox/s | chunked / in-memory | peak host MiB | peak GPU MiB | objects | passes |"
    print(header)
    print("|" + "---|" * 9)
    outs = {m: os.path.join(folder, f"seg_labels_{m}_{size}.zarr") for m in ("in-memory", "chunked", "chunked-blocks")}
    modes = ("chunked", "chunked-blocks") if args.skip_in_memory else ("in-memory", "chunked", "chunked-blocks")
    results = {}
    for mode in modes:
        cmd = [sys.executable, __file__, "--segment-child", mode, path, outs[mode], str(args.chunk), str(args.gpus),
               str(args.iterations), str(args.hops)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"{mode} failed:\n{done.stderr[-3000:]}")
            return 1
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    rows = []
    for mode, r in results.items():
        ratio = results["in-memory"]["seconds"] / r["seconds"] if "in-memory" in results else float("nan")
        name = f"chunked, {args.chunk}³ blocks" if mode == "chunked-blocks" else mode
        rows.append(f"| {size}³ | {name} | {r['seconds']:.2f} | {size**3 / r['seconds'] / 1e6:.2f} | {ratio:.2f} | "
                    f"{r['peak_mib']:.0f} | {r['gpu_mib']:.0f} | {r['count']} | {r['passes']} |")
        print(rows[-1], flush=True)
    if "in-memory" in results:
        for mode in ("chunked", "chunked-blocks"):
            differ = _differing_voxels(outs["in-memory"], outs[mode], args.chunk)
            print(f"voxels whose labels differ ({mode} vs in-memory): {differ} of {size**3}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(header + "\n|" + "---|" * 9 + "\n" + "\n".join(rows) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segment", action="store_true", help="benchmark chunked segmentation (segment_main)")
    parser.add_argument("--iterations", type=int, default=100, help="--segment: level-set iterations")
    parser.add_argument("--skip-in-memory", action="store_true", help="--segment: only the chunked path")
    parser.add_argument("--hops", type=int, default=2, help="--segment: the chunked path's halo (box overlaps)")
    parser.add_argument("--segment-child", nargs=7, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 384, 512])
    parser.add_argument("--chunk", type=int, default=None, help="block side (default 128; 256 with --segment)")
    parser.add_argument("--dir", default=None, help="where the Zarr masks go (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="also write the table (Markdown) here")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    detect = parser.add_argument_group("detection (--detect)")
    detect.add_argument("--detect", action="store_true", help="benchmark chunked detection instead of labelling")
    detect.add_argument("--size", type=int, default=256, help="cube side of the nuclei volume (default 256; also --segment)")
    detect.add_argument("--radius", type=float, default=6.0, help="largest nucleus radius, voxels (default 6)")
    detect.add_argument("--gpus", type=int, default=1,
                        help="GPUs for the multi-GPU run (default 1: none); --segment: GPU workers of the chunked path")
    detect.add_argument("--chunks", type=int, nargs="*", default=None,
                        help="also run blocks of these cube sides (default: half the volume's side: 8 blocks)")
    detect.add_argument("--backend", default="auto", help="detection backend (default: the GPU, else Numba)")
    detect.add_argument("--every-voter", action="store_true",
                        help="also run each --chunks size with every voter of the halo in every pass (the peer)")
    detect.add_argument("--halo-study", action="store_true",
                        help="cells of chunked detection with fractions of the exact halo vs in-memory (2D and 3D "
                             "synthetic nuclei; on this machine's backend)")
    detect.add_argument("--detect-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.segment_child:
        mode, path, out, chunk, gpus, iterations, hops = args.segment_child
        print(json.dumps(_segment_child(mode, path, out, int(chunk), int(gpus), int(iterations), int(hops))))
        return 0
    if args.segment:
        args.chunk = args.chunk or 256
        return segment_main(args)
    args.chunk = args.chunk or 128
    if args.detect_child:
        print(json.dumps(_detect_child(json.loads(args.detect_child[0]), args.detect_child[1])))
        return 0
    if args.halo_study:
        return halo_study(args)
    if args.detect:
        return detect_main(args)
    if args.child:
        mode, path, out, chunk = args.child
        print(json.dumps(_child(mode, path, out, int(chunk))))
        return 0

    from ivote._backend import backend_name

    folder = args.dir or tempfile.mkdtemp(prefix="ivote-scale-")
    rows = []
    header = "| volume | chunks | path | s | Mvox/s | chunked / in-memory | peak host MiB | count |"
    print(f"bench_scale {date.today()} on {platform.node()}, {os.cpu_count()} CPUs, {backend_name()}")
    print(header)
    print("|" + "---|" * 8)
    for size in args.sizes:
        path = os.path.join(folder, f"mask_{size}.zarr")
        write_mask(path, size, args.chunk)
        results = {m: _run_child(m, path, os.path.join(folder, f"labels_{m}_{size}.zarr"), args.chunk)
                   for m in ("in-memory", "chunked")}
        voxels = size**3
        for mode, r in results.items():
            ratio = results["in-memory"]["seconds"] / r["seconds"]
            row = (f"| {size}³ | {args.chunk}³ | {mode} | {r['seconds']:.2f} | {voxels / r['seconds'] / 1e6:.1f} | "
                   f"{ratio:.2f} | {r['peak_mib']:.0f} | {r['count']} |")
            rows.append(row)
            print(row, flush=True)
        if results["chunked"]["count"] != results["in-memory"]["count"]:
            print(f"MISMATCH at {size}: counts differ")
            return 1
    if args.out:
        with open(args.out, "w") as f:
            f.write(header + "\n|" + "---|" * 8 + "\n" + "\n".join(rows) + "\n")
    return 0


# ---------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------

_TILE = 128


def _nuclei_tile(origin, shape, size, radius, seed=0):
    """The nuclei volume inside one tile: balls of radius 0.6-1.0 x ``radius`` on a
    jittered grid, brightness 0.5-1, blurred (sigma 1, from a margin, so tiles
    join without seams), plus Gaussian noise (sd 0.03); float32."""
    from scipy import ndimage

    step = 2.2 * radius
    margin = 4
    lo = [o - margin for o in origin]
    hi = [o + s + margin for o, s in zip(origin, shape)]
    field = np.zeros([h - l for l, h in zip(lo, hi)], np.float32)
    cells = [range(max(0, int((l - radius) // step)), min(int(size // step) + 1, int((h + radius) // step) + 1))
             for l, h in zip(lo, hi)]
    for cell in np.ndindex(*[len(c) for c in cells]):
        index = tuple(c[i] for c, i in zip(cells, cell))
        rng = np.random.default_rng(abs(hash((seed,) + index)) % 2**32)
        centre = [i * step + step / 2 + rng.uniform(-0.2, 0.2) * step for i in index]
        r = radius * rng.uniform(0.6, 1.0)
        box = [slice(max(0, int(c - r) - l), max(0, min(h - l, int(c + r) + 2 - l))) for c, l, h in zip(centre, lo, hi)]
        if any(b.stop <= b.start for b in box):
            continue
        grids = np.ogrid[tuple(slice(b.start + l, b.stop + l) for b, l in zip(box, lo))]
        inside = sum((g - c) ** 2 for g, c in zip(grids, centre)) <= r * r
        np.maximum(field[tuple(box)], inside * np.float32(rng.uniform(0.5, 1.0)), out=field[tuple(box)])
    field = ndimage.gaussian_filter(field, 1.0)[tuple(slice(margin, -margin) for _ in shape)]
    noise = np.random.default_rng(abs(hash((seed, -1) + tuple(origin))) % 2**32).normal(0, 0.03, field.shape)
    return (field + noise).astype(np.float32)


def _write_tiles(job):
    import zarr

    path, size, radius, origins = job
    volume = zarr.open_array(path, mode="r+")
    for origin in origins:
        shape = [min(_TILE, size - o) for o in origin]
        volume[tuple(slice(o, o + s) for o, s in zip(origin, shape))] = _nuclei_tile(origin, shape, size, radius)


def write_nuclei_volume(path, size: int, radius: float):
    """The N³ nuclei volume as an uncompressed Zarr array (chunks of 128³), written by parallel processes."""
    import multiprocessing

    import zarr

    if os.path.exists(os.path.join(path, "zarr.json")):
        return zarr.open_array(path, mode="r")
    zarr.create_array(path + ".part", shape=(size,) * 3, chunks=(_TILE,) * 3, dtype="float32", compressors=None,
                      overwrite=True)
    origins = [tuple(i * _TILE for i in index) for index in np.ndindex(*(math.ceil(size / _TILE),) * 3)]
    workers = max(1, min(os.cpu_count() or 1, 16))
    jobs = [(path + ".part", size, radius, origins[i::workers]) for i in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_write_tiles, jobs)
    os.rename(path + ".part", path)
    return zarr.open_array(path, mode="r")


class _GpuPeak:
    """Peak device-wide GPU memory in use (every GPU, above the baseline), polled every 20 ms."""

    def __init__(self):
        import threading

        from ivote._backend import _cupy

        self.cupy = _cupy()
        self.devices = self.cupy.cuda.runtime.getDeviceCount() if self.cupy else 0
        self.base = [self._used(d) for d in range(self.devices)]
        self.peak = list(self.base)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _used(self, device):
        with self.cupy.cuda.Device(device):
            free, total = self.cupy.cuda.runtime.memGetInfo()
        return total - free

    def _poll(self):
        while not self.stop.wait(0.02):
            for d in range(self.devices):
                self.peak[d] = max(self.peak[d], self._used(d))

    def result(self) -> float:
        self.stop.set()
        self.thread.join()
        return max((p - b for p, b in zip(self.peak, self.base)), default=0) / 2**20


def _detect_child(job: dict, mode: str) -> dict:
    import zarr

    from ivote import iterative_voting
    from ivote.distributed import cluster, detect_chunked

    volume = zarr.open_array(job["path"], mode="r")
    options = dict(backend=job["backend"])
    warm = np.asarray(volume[:48, :48, :48])
    iterative_voting(warm, radius=job["radius"], **options)  # compile and self-test the kernels
    detect_chunked(warm, job["radius"], chunks=24, halo=4, scheduler="threads", **options)
    if job.get("every_voter"):
        _every_voter_each_pass()
    phases = _time_phases()
    gpu = _GpuPeak()
    read = 0.0
    start = time.perf_counter()
    if mode == "in-memory":
        whole = np.asarray(volume[:])
        read = time.perf_counter() - start
        start = time.perf_counter()
        found = iterative_voting(whole, radius=job["radius"], **options)
        del whole
    elif job["gpus"] > 1:
        with cluster("local", gpus=job["gpus"]):
            start = time.perf_counter()
            found = detect_chunked(volume, job["radius"], chunks=job["chunks"], **options)
    else:
        found = detect_chunked(volume, job["radius"], chunks=job["chunks"], scheduler="threads", **options)
    seconds = time.perf_counter() - start
    gpu_mib = gpu.result() if gpu.devices else 0.0
    host = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    reference = os.path.join(os.path.dirname(job["path"]), f"candidates_{job['size']}_{job['radius']:g}.npz")
    if mode == "in-memory":
        np.savez(reference, candidates=found.candidates, scores=found.candidate_scores,
                 contrasts=found.candidate_contrasts)
        equal = True
    else:
        expected = np.load(reference)
        equal = bool(np.array_equal(found.candidates, expected["candidates"])
                     and np.array_equal(found.candidate_scores, expected["scores"])
                     and np.array_equal(found.candidate_contrasts, expected["contrasts"]))
    return {"seconds": seconds, "read": read, "cells": len(found.points), "backend": found.backend,
            "host_mib": host / 1024, "gpu_mib": gpu_mib, "equal": equal, "phases": phases}


def _time_phases() -> dict:
    """Wall seconds of each pass over the blocks (by task function) and the reads summed over
    the tasks' threads, filled in as ``detect_chunked`` runs."""
    from ivote.distributed import _detect, _detect_block, _detect_statistics, _tasks

    phases: dict = {}
    run, read = _tasks._Runner.run, _tasks._read

    def timed_run(self, function, *args, **kwargs):
        start = time.perf_counter()
        try:
            return run(self, function, *args, **kwargs)
        finally:
            name = function.__name__.strip("_").replace("_task", "")
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - start

    def timed_read(source):
        start = time.perf_counter()
        try:
            return read(source)
        finally:
            phases["reads (summed)"] = phases.get("reads (summed)", 0.0) + time.perf_counter() - start

    _tasks._Runner.run = timed_run
    for module in (_detect, _detect_block, _detect_statistics):  # each reads its blocks through its own name
        module._read = timed_read
    enter, leave = _tasks.gpu_limit.__enter__, _tasks.gpu_limit.__exit__

    def timed_enter(self):
        enter(self)
        self.entered = time.perf_counter()

    def timed_exit(self, *exc):
        phases["GPU held"] = phases.get("GPU held", 0.0) + time.perf_counter() - self.entered
        return leave(self, *exc)

    _tasks.gpu_limit.__enter__, _tasks.gpu_limit.__exit__ = timed_enter, timed_exit
    return phases


def _every_voter_each_pass() -> None:
    """The block passes as before ``detect._reach``: every voter of the halo in every pass."""
    from ivote.detect import _reach

    _reach.pass_margin = lambda plan, k: [1 << 30] * plan.ndim


def detect_main(args) -> int:
    from ivote._backend import backend_name
    from ivote.detect._plan import make_plan
    from ivote.distributed import detection_halo

    folder = args.dir or tempfile.mkdtemp(prefix="ivote-scale-")
    path = os.path.join(folder, f"nuclei_{args.size}.zarr")
    start = time.perf_counter()
    write_nuclei_volume(path, args.size, args.radius)
    halo = detection_halo(make_plan(args.radius, (1.0,) * 3, 3), (2.0,) * 3)
    print(f"bench_scale --detect {date.today()} on {platform.node()}, {os.cpu_count()} CPUs, {backend_name()}; "
          f"{args.size}³ float32 Zarr ({time.perf_counter() - start:.1f} s to write or open), radius {args.radius:g}, "
          f"halo {halo[0]} voxels")
    if args.chunks is None:
        args.chunks = [args.size // 2]
    runs = [("in-memory", None, 1), ("chunked", None, 1)] + [("chunked", c, 1) for c in args.chunks]
    if args.every_voter:
        runs += [("chunked, every voter each pass", c, 1) for c in args.chunks]
    if args.gpus > 1:
        runs += [("chunked", None, args.gpus)] + [("chunked", c, args.gpus) for c in args.chunks]
    header = ("| volume | path | GPUs | blocks | s | Mvox/s | / in-memory | peak host MiB | peak GPU MiB | cells "
              "| equal |")
    rows, reference = [header, "|" + "---|" * 11], None
    print("\n".join(rows), flush=True)
    voxels = args.size**3
    for mode, chunks, gpus in runs:
        job = dict(path=path, size=args.size, radius=args.radius, backend=args.backend, gpus=gpus,
                   chunks=chunks, every_voter=mode.endswith("each pass"))
        cmd = [sys.executable, __file__, "--detect-child", json.dumps(job), mode.split(",")[0]]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"| {args.size}³ | {mode} | {gpus} | {chunks or 'default'} | failed: "
                  f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode} |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        reference = r if mode == "in-memory" else reference
        ratio = reference["seconds"] / r["seconds"] if reference else float("nan")
        blocks = "-" if mode == "in-memory" else (f"{chunks}³" if chunks else "default")
        extra = f" (+{r['read']:.2f} s read)" if mode == "in-memory" else ""
        row = (f"| {args.size}³ | {mode.split(',')[0]} ({r['backend']}){mode.partition(',')[2]} | {gpus} | {blocks} | {r['seconds']:.2f}{extra} | "
               f"{voxels / r['seconds'] / 1e6:.1f} | {ratio:.2f} | {r['host_mib']:.0f} | {r['gpu_mib']:.0f} | "
               f"{r['cells']} | {'yes' if r['equal'] else 'NO'} |")
        _add_row(rows, row)
        if r.get("phases"):
            print("    phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()), flush=True)
    _write_table(args.out, rows)
    return 0


def _add_row(rows: list, row: str) -> None:
    rows.append(row)
    print(row, flush=True)


def _write_table(out, rows, title: str = "") -> None:
    if out:
        with open(out, "w") as f:
            f.write((title + "\n\n" if title else "") + "\n".join(rows) + "\n")


def halo_study(args) -> int:
    """Chunked detection with the exact halo and fractions of it, against the in-memory cells:
    identical candidates?, cells matched within one voxel (F1), cells missing or extra, voxels
    read per voxel of the image, seconds."""
    from ivote import iterative_voting
    from ivote.data import synthetic_nuclei
    from ivote.detect._plan import make_plan
    from ivote.distributed import detect_chunked, detection_halo
    from ivote.metrics import match_points

    cases = [("2D 768², r 6", (768, 768), (1.0, 1.0), 6.0, 96),
             ("3D 48x160x160, z 2, r 5", (48, 160, 160), (2.0, 1.0, 1.0), 5.0, (24, 48, 48))]
    header = "| image | blocks | halo (voxels) | identical | F1 within 1 voxel | missing / extra | read / image | s |"
    rows = [header, "|" + "---|" * 8]
    title = (f"bench_scale --halo-study {date.today()} on {platform.node()}, {os.cpu_count()} CPUs, "
             f"backend {args.backend}")
    print(title)
    print("\n".join(rows), flush=True)
    for name, shape, spacing, radius, chunks in cases:
        image = synthetic_nuclei(shape, spacing=spacing, radius=radius, seed=3).image
        whole = iterative_voting(image, radius=radius, spacing=spacing, backend=args.backend)
        exact = detection_halo(make_plan(radius, spacing, len(shape)), tuple(2.0 * min(spacing) / s for s in spacing))
        for fraction in (1.0, 0.5, 0.33, 0.25, 0.15):
            halo = tuple(max(1, round(h * fraction)) for h in exact)
            start = time.perf_counter()
            found = detect_chunked(image, radius, spacing=spacing, chunks=chunks, halo=halo, scheduler="threads",
                                   backend=args.backend)
            seconds = time.perf_counter() - start
            same = np.array_equal(found.candidates, whole.candidates) and np.array_equal(
                found.candidate_scores, whole.candidate_scores)
            match = match_points(found.points, whole.points, tolerance=1.0, spacing=None)
            c = (chunks,) * len(shape) if isinstance(chunks, int) else chunks
            read = math.prod(sum(min(n, s + k + h) - max(0, s - h) for s in range(0, n, k))
                             for n, k, h in zip(shape, c, halo)) / math.prod(shape)
            row = (f"| {name} | {'x'.join(map(str, c))} | {'x'.join(map(str, halo))} ({fraction:g}) | "
                   f"{'yes' if same else 'no'} | {match.f1:.4f} | {match.false_negatives} / {match.false_positives} | "
                   f"{read:.2f} | {seconds:.1f} |")
            _add_row(rows, row)
    _write_table(args.out, rows, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
