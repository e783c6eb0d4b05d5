"""Whole-slide H&E detection block by block: peak host memory and time as the slide grows.

    python benchmarks/bench_slide.py [--sizes 8192 16384 32768] [--peer-size 8192] [--memory-limit 512MB]
                                     [--backend numba] [--dir DIR] [--out benchmarks/results/slide.md]
                                     [--compression jpeg|zlib] [--tissue-fraction F] [--levels 4]
                                     [--threads N] [--json results.json]

For each size N, a synthetic N x N H&E slide (``ivote.data._slide.write_synthetic_slide``:
tiles of 1024² synthetic nuclei of radius <= 6 px coloured by Beer-Lambert with
hematoxylin and eosin, 0.5 um pixels) is written as a tiled (256²) pyramidal TIFF of
``--levels`` levels, tile by tile (JPEG, or zlib with each distinct tile compressed once).
The default layout makes a third of the tiles glass inside the tissue; ``--tissue-fraction F``
puts the tissue in a centred ellipse of about that share of the slide with glass around it
(a scanned section). Then, each in a fresh process after a warm-up detection (compilation
excluded), so that its peak resident memory (ru_maxrss) is its own:

- ``blocks``: ``ivote.open_image`` (level 0, lazy) and ``ivote.distributed.detect_chunked``
  under ``--memory-limit``, the tissue mask from the slide's smallest level
  (``tissue_mask``), fixed (Ruifrok) stain vectors; reads and decoding included; each
  block's cells are streamed to ``PATH.blocks.streamed.f32`` as it finishes (``on_block``;
  float32 rows y, x, score), the final cells and scores to ``PATH.blocks.npy``;
- ``in memory`` (the peer, at ``--peer-size`` only): the slide read whole, its hematoxylin
  density with the same mask (``HematoxylinBlocks.whole``), ``ivote.iterative_voting``.

Printed: write seconds, detection seconds, Mpixels/s, peak host memory, peak GPU memory (the
CuPy pool's bytes and the device's used memory, sampled every 20 ms, GPU backend only), the
blocks (detected / all), cells, and whether the cells equal the in-memory ones. The goal
(issue 31): memory flat in the slide's size.

``--threads`` sets the Dask threads that read and decode blocks while the GPU (or Numba)
detects one (``ivote.distributed._detect.THREADS``, 4 by default).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

RADIUS_PX = 6


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _mask(path):
    from ivote._slides import slide_levels
    from ivote.detect._colour_blocks import tissue_mask

    levels = slide_levels(path)
    cell = round(levels[0].shape[0] / levels[-1].shape[0])
    return tissue_mask(levels[-1], cell=cell)


def _warm_up(backend):
    from ivote import iterative_voting
    from ivote.data._slide import synthetic_he_tile
    from ivote.detect import hematoxylin_density

    rgb, _ = synthetic_he_tile(256, radius=RADIUS_PX, seed=0)
    iterative_voting(hematoxylin_density(rgb), radius=RADIUS_PX, backend=backend)  # the blocks' own path


class _GpuPeak:
    """Peak GPU memory while it runs: the CuPy pool's bytes and the device's used memory
    (``cudaMemGetInfo``: every allocation of the process and its context), sampled every 20 ms."""

    def __init__(self, backend):
        from ivote._backend import select_xp

        self.cupy = None if select_xp(backend) is np else select_xp(backend)
        self.pool = self.device = 0
        self._stop = threading.Event()
        self._thread = None

    def _sample(self):
        pool = self.cupy.get_default_memory_pool()
        free, total = self.cupy.cuda.runtime.memGetInfo()
        self.pool, self.device = max(self.pool, pool.total_bytes()), max(self.device, total - free)

    def __enter__(self):
        if self.cupy is not None:
            self._sample()
            self.baseline_device = self.device

            def loop():
                self.cupy.cuda.Device(0).use()
                while not self._stop.wait(0.02):
                    self._sample()

            self._thread = threading.Thread(target=loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._sample()

    def report(self) -> dict:
        if self.cupy is None:
            return {}
        return dict(gpu_pool_peak_mb=self.pool / 2**20, gpu_device_peak_mb=self.device / 2**20,
                    gpu_device_before_mb=self.baseline_device / 2**20)


def child(mode: str, path: str, memory_limit: str, backend: str, threads: int | None) -> dict:
    """One measurement in this (fresh) process: the cells and scores go to ``PATH.MODE.npy`` (and, block
    by block, each block's provisional cells to ``PATH.MODE.streamed.f32`` as it finishes)."""
    import ivote.distributed._detect as chunked_engine
    from ivote import iterative_voting, open_image
    from ivote.detect._colour_blocks import HematoxylinBlocks
    from ivote.distributed import detect_chunked

    if threads:
        chunked_engine.THREADS = threads
    _warm_up(backend)
    warm = _peak_mb()
    start = time.perf_counter()
    mask = _mask(path)
    image = open_image(path)
    extra = {}
    with _GpuPeak(backend) as gpu:
        if mode == "blocks":
            calls, first = [], []
            streamed = Path(path).with_suffix(f".{mode}.streamed.f32")
            with open(streamed, "wb") as stream:

                def on_block(points, scores):
                    if not first:
                        first.append(time.perf_counter() - start)
                    stream.write(np.column_stack([points, scores]).astype(np.float32).tobytes())
                    extra["streamed"] = extra.get("streamed", 0) + len(points)
                    extra["detected_blocks"] = extra.get("detected_blocks", 0) + 1

                def progress(done, total):
                    calls.append(total)
                    if total > 1 and done % max(1, total // 10) == 0:  # a long run shows where it is
                        print(f"{mode}: {done}/{total} block tasks, {time.perf_counter() - start:.1f} s, "
                              f"{extra.get('streamed', 0)} cells streamed", file=sys.stderr, flush=True)

                found = detect_chunked(image.data, RADIUS_PX, memory_limit=memory_limit, tissue=mask,
                                       backend=backend, progress=progress, on_block=on_block)
            extra["blocks"] = calls[-1] // 2 if calls and calls[-1] > 1 else 1  # two passes over the blocks
            extra["first_block_s"] = first[0] if first else None
        else:
            rgb = np.asarray(image.data)
            grey = HematoxylinBlocks(rgb, tissue=mask).whole()
            del rgb
            found = iterative_voting(grey, radius=RADIUS_PX, backend=backend)
    seconds = time.perf_counter() - start
    out = Path(path).with_suffix(f".{mode}.npy")
    np.save(out, np.column_stack([found.points, found.scores]))
    return dict(mode=mode, seconds=seconds, peak_mb=_peak_mb(), warm_mb=warm, cells=len(found.points),
                tissue=mask.fraction, points=str(out), backend=found.backend, threads=chunked_engine.THREADS,
                **gpu.report(), **extra)


def _run_child(mode, path, memory_limit, backend, threads) -> dict:
    command = [sys.executable, __file__, "--child", mode, str(path), "--memory-limit", memory_limit,
               "--backend", backend] + (["--threads", str(threads)] if threads else [])
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)  # its stderr: the log
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {path} failed (exit status {done.returncode}; its log above)")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--peer-size", type=int, default=8192, help="size of the in-memory peer run (0: none)")
    parser.add_argument("--memory-limit", default="512MB")
    parser.add_argument("--backend", default="numba")
    parser.add_argument("--dir", default=None, help="folder for the slides (default: a temporary one)")
    parser.add_argument("--out", default=None, help="markdown file for the table")
    parser.add_argument("--json", default=None, help="JSON file for every measurement")
    parser.add_argument("--compression", default="jpeg", choices=("jpeg", "zlib"))
    parser.add_argument("--tissue-fraction", type=float, default=None,
                        help="tissue as a centred ellipse of this share of the slide, glass around it")
    parser.add_argument("--levels", type=int, default=4, help="pyramid levels written")
    parser.add_argument("--threads", type=int, default=None, help="Dask threads reading blocks (default 4)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.memory_limit, args.backend, args.threads)))
        return 0

    from ivote.data._slide import write_synthetic_slide

    folder = Path(args.dir or tempfile.mkdtemp(prefix="ivote-slides-"))
    folder.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    rows = []
    layout = "ellipse" if args.tissue_fraction else "checker"
    for size in args.sizes:
        path = folder / f"he_{size}_{layout}{args.tissue_fraction or ''}_{args.compression}_{args.levels}.tif"
        written = {}
        if not path.exists():
            start = time.perf_counter()
            write_synthetic_slide(path, size, tile=256, pattern=1024, radius=RADIUS_PX,
                                  glass_every=0 if args.tissue_fraction else 3, levels=args.levels,
                                  compression=args.compression, tissue_fraction=args.tissue_fraction)
            written = dict(write_s=time.perf_counter() - start, file_mb=path.stat().st_size / 2**20)
            print(f"wrote {path.name} ({written['file_mb']:.0f} MiB) in {written['write_s']:.1f} s", file=sys.stderr)
        modes = ["blocks"] + (["in memory"] if size == args.peer_size else [])
        found = {}
        for mode in modes:
            found[mode] = dict(_run_child(mode.replace(" ", "_"), path, args.memory_limit, args.backend, args.threads),
                               size=size, **written)
            print(json.dumps(found[mode]), file=sys.stderr)
        same = ""
        if "in memory" in found:
            equal = np.array_equal(np.load(found["blocks"]["points"]), np.load(found["in memory"]["points"]))
            same = "yes" if equal else "NO"
        for mode, result in found.items():
            rows.append((size, mode, result, same))
        _write_table(rows, args, load)
    return 0


def _write_table(rows, args, load) -> None:
    """Print the table so far (and write it to ``--out``, every measurement to ``--json``): a long run
    leaves its finished sizes behind."""
    command = (f"python benchmarks/bench_slide.py --sizes {' '.join(map(str, args.sizes))} --peer-size "
               f"{args.peer_size} --memory-limit {args.memory_limit} --backend {args.backend} --compression "
               f"{args.compression} --levels {args.levels}"
               + (f" --tissue-fraction {args.tissue_fraction}" if args.tissue_fraction else "")
               + (f" --threads {args.threads}" if args.threads else ""))
    layout = (f"the tissue a centred ellipse of about {args.tissue_fraction:.0%} of the slide, glass around it"
              if args.tissue_fraction else "a third of the tiles glass")
    gpu = rows and "gpu_pool_peak_mb" in rows[0][2]
    lines = [
        "# Whole-slide H&E detection block by block",
        "",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; Python "
        f"{platform.python_version()}; backend {rows[0][2]['backend'] if rows else args.backend}; date: "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start {load[0]:.1f}",
        f"command: `{command}`",
        "",
        f"Synthetic H&E slides (tiles of 1024² synthetic nuclei, radius <= 6 px, {layout}), "
        f"tiled 256², {args.compression}, {args.levels} levels, written tile by tile. Times include reading and "
        "decoding; the tissue mask comes from the smallest level. Peak memory: the process's resident peak "
        "(ru_maxrss), after a warm-up detection in the same process (its peak in brackets)."
        + (" Peak GPU memory: CuPy's pool / the device's used memory (cudaMemGetInfo), sampled every 20 ms."
           if gpu else ""),
        "",
        "| slide | file (MiB) | write s | run | seconds | Mpixel/s | peak host memory (MiB) | "
        + ("peak GPU memory (MiB) | " if gpu else "") + "blocks | tissue | cells | same cells as in memory |",
        "| --- | --- | --- | --- | --- | --- | --- | " + ("--- | " if gpu else "") + "--- | --- | --- | --- |",
    ]
    for size, mode, result, same in rows:
        rate = size * size / result["seconds"] / 1e6
        file_mb = f"{result['file_mb']:.0f}" if "file_mb" in result else "-"
        write_s = f"{result['write_s']:.1f}" if "write_s" in result else "-"
        gpu_cell = (f"{result['gpu_pool_peak_mb']:.0f} / {result['gpu_device_peak_mb']:.0f} | " if gpu else "")
        blocks = f"{result.get('detected_blocks', 1)} / {result.get('blocks', 1)}"
        lines.append(f"| {size}² RGB ({size * size * 3 / 2**30:.1f} GiB) | {file_mb} | {write_s} | {mode} | "
                     f"{result['seconds']:.1f} | {rate:.1f} | {result['peak_mb']:.0f} ({result['warm_mb']:.0f}) | "
                     f"{gpu_cell}{blocks} | {100 * result['tissue']:.0f}% | {result['cells']} | {same} |")
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps([dict(result, run=mode, same=same) for _, mode, result, same in rows],
                                              indent=1), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
