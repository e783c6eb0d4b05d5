"""Whole-slide H&E detection block by block: peak host memory and time as the slide grows.

    python benchmarks/bench_slide.py [--sizes 8192 16384 32768] [--peer-size 8192] [--memory-limit 512MB]
                                     [--backend numba] [--dir DIR] [--out benchmarks/results/slide.md]

For each size N, a synthetic N x N H&E slide (``ivote.data._slide.write_synthetic_slide``:
tiles of 1024² synthetic nuclei of radius <= 6 px coloured by Beer-Lambert with
hematoxylin and eosin, a third of them glass, 0.5 um pixels) is written as a tiled (256²),
JPEG-compressed pyramidal TIFF of four levels, tile by tile. Then, each in a fresh process
after a warm-up detection (compilation excluded), so that its peak resident memory
(ru_maxrss) is its own:

- ``blocks``: ``ivote.open_image`` (level 0, lazy) and ``ivote.distributed.detect_chunked``
  under ``--memory-limit``, the tissue mask from the slide's smallest level
  (``tissue_mask``), fixed (Ruifrok) stain vectors; reads and JPEG decoding included;
- ``in memory`` (the peer, at ``--peer-size`` only): the slide read whole, its hematoxylin
  density with the same mask (``HematoxylinBlocks.whole``), ``ivote.iterative_voting``.

Printed: seconds, Mpixels/s, peak host memory, the blocks (detected / all), cells, and
whether the cells equal the in-memory ones. The goal (issue 31): memory flat in the
slide's size.
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
import time
from pathlib import Path

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

    rgb, _ = synthetic_he_tile(256, radius=RADIUS_PX, seed=0)
    iterative_voting(rgb, radius=RADIUS_PX, backend=backend)


def child(mode: str, path: str, memory_limit: str, backend: str) -> dict:
    """One measurement in this (fresh) process: the cells go to ``PATH.MODE.npy``."""
    import numpy as np

    from ivote import iterative_voting, open_image
    from ivote.detect._colour_blocks import HematoxylinBlocks
    from ivote.distributed import detect_chunked

    _warm_up(backend)
    warm = _peak_mb()
    start = time.perf_counter()
    mask = _mask(path)
    image = open_image(path)
    extra = {}
    if mode == "blocks":
        calls = []
        found = detect_chunked(image.data, RADIUS_PX, memory_limit=memory_limit, tissue=mask, backend=backend,
                               progress=lambda done, total: calls.append(total))
        extra["blocks"] = calls[-1] // 2 if calls and calls[-1] > 1 else 1  # two passes over the blocks
    else:
        rgb = np.asarray(image.data)
        grey = HematoxylinBlocks(rgb, tissue=mask).whole()
        del rgb
        found = iterative_voting(grey, radius=RADIUS_PX, backend=backend)
    seconds = time.perf_counter() - start
    out = Path(path).with_suffix(f".{mode}.npy")
    np.save(out, found.points)
    return dict(mode=mode, seconds=seconds, peak_mb=_peak_mb(), warm_mb=warm, cells=len(found.points),
                tissue=mask.fraction, points=str(out), backend=found.backend, **extra)


def _run_child(mode, path, memory_limit, backend) -> dict:
    command = [sys.executable, __file__, "--child", mode, str(path), "--memory-limit", memory_limit,
               "--backend", backend]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--peer-size", type=int, default=8192, help="size of the in-memory peer run (0: none)")
    parser.add_argument("--memory-limit", default="512MB")
    parser.add_argument("--backend", default="numba")
    parser.add_argument("--dir", default=None, help="folder for the slides (default: a temporary one)")
    parser.add_argument("--out", default=None, help="markdown file for the table")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.memory_limit, args.backend)))
        return 0

    import numpy as np

    from ivote.data._slide import write_synthetic_slide

    folder = Path(args.dir or tempfile.mkdtemp(prefix="ivote-slides-"))
    folder.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    rows = []
    for size in args.sizes:
        path = folder / f"he_{size}.tif"
        if not path.exists():
            start = time.perf_counter()
            write_synthetic_slide(path, size, tile=256, pattern=1024, radius=RADIUS_PX, glass_every=3, levels=4)
            print(f"wrote {path.name} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - start:.1f} s",
                  file=sys.stderr)
        modes = ["blocks"] + (["in memory"] if size == args.peer_size else [])
        found = {}
        for mode in modes:
            found[mode] = _run_child(mode.replace(" ", "_"), path, args.memory_limit, args.backend)
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
    """Print the table so far (and write it to ``--out``): a long run leaves its finished sizes behind."""
    lines = [
        "# Whole-slide H&E detection block by block",
        "",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; Python "
        f"{platform.python_version()}; backend {rows[0][2]['backend'] if rows else args.backend}; date: "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start {load[0]:.1f}",
        f"command: `python benchmarks/bench_slide.py --sizes {' '.join(map(str, args.sizes))} --peer-size "
        f"{args.peer_size} --memory-limit {args.memory_limit} --backend {args.backend}`",
        "",
        "Synthetic H&E slides (tiles of 1024² synthetic nuclei, radius <= 6 px, a third of the tiles glass), "
        "tiled 256², JPEG, 4 levels. Times include reading and decoding; the tissue mask comes from the "
        "smallest level. Peak memory: the process's resident peak (ru_maxrss), after a warm-up "
        "detection in the same process (its peak in brackets).",
        "",
        "| slide | run | seconds | Mpixel/s | peak host memory (MiB) | blocks | tissue | cells | same cells as in memory |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for size, mode, result, same in rows:
        rate = size * size / result["seconds"] / 1e6
        lines.append(f"| {size}² RGB ({size * size * 3 / 2**30:.1f} GiB) | {mode} | {result['seconds']:.1f} | "
                     f"{rate:.1f} | {result['peak_mb']:.0f} ({result['warm_mb']:.0f}) | {result.get('blocks', 1)} | "
                     f"{100 * result['tissue']:.0f}% | {result['cells']} | {same} |")
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
