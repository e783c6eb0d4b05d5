"""CPU time of the Numba detection by kernel: where a call's time goes.

Wraps ``ivote._parallel.for_ranges`` as ``detect/_numba.py`` sees it and sums
the process CPU time of each kernel (run with ``NUMBA_NUM_THREADS=1`` for a
breakdown that a shared machine disturbs least); prints the minimum over
``--repeat`` calls after a warm-up (compile, tables). The remainder of the
total is Python and NumPy between the kernels (threshold, close pairs,
sorting the cells). ``--per-pass``: also the voting kernels pass by pass
(each call's minimum over the repeats: the calls come in the same order):
the regroup, the vote (one number per colour), the scan, and the turn that
ends the pass (it reads that pass's votes, with its cones).

Usage: NUMBA_NUM_THREADS=1 python benchmarks/studies/profile_numba_detect.py [--side2 1024] [--side3 96] [--repeat 5]
       [--per-pass]
"""

from __future__ import annotations

import argparse
import collections
import time

import ivote
from ivote.data import synthetic_nuclei
from ivote.detect import _numba


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side2", type=int, default=1024, help="2D image side (radius 12 px)")
    parser.add_argument("--side3", type=int, default=96, help="3D volume side (radius 8 voxels)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--per-pass", action="store_true", help="also the voting kernels pass by pass")
    args = parser.parse_args(argv)

    spent = collections.defaultdict(float)
    calls = []
    for_ranges = _numba.for_ranges

    def timed(kernel, *a, **k):
        t = time.process_time()
        try:
            return for_ranges(kernel, *a, **k)
        finally:
            spent[kernel.__name__] += time.process_time() - t
            calls.append((kernel.__name__, time.process_time() - t))

    _numba.for_ranges = timed
    cases = [("2D", (args.side2,) * 2, 12.0, 21), ("3D", (args.side3,) * 3, 8.0, 22)]
    for name, shape, radius, seed in cases:
        image = synthetic_nuclei(shape, radius=radius, seed=seed).image
        ivote.iterative_voting(image, radius=radius, backend="numba")
        best = collections.defaultdict(lambda: float("inf"))
        fastest_calls = None
        for _ in range(args.repeat):
            spent.clear()
            calls.clear()
            t = time.process_time()
            ivote.iterative_voting(image, radius=radius, backend="numba")
            fastest_calls = list(calls) if fastest_calls is None else [
                (name, min(a, b)) for (name, a), (_, b) in zip(fastest_calls, calls)]
            spent["total"] = time.process_time() - t
            spent["other (Python, NumPy)"] = spent["total"] - sum(v for k, v in spent.items() if k != "total")
            for key, value in spent.items():
                best[key] = min(best[key], value)
        print(f"{name} {'x'.join(map(str, shape))}, radius {radius:g}: CPU s, min of {args.repeat}")
        for key, value in sorted(best.items(), key=lambda kv: -kv[1]):
            print(f"  {key:24s} {value:.3f}")
        if args.per_pass:
            _print_passes(fastest_calls)
    _numba.for_ranges = for_ranges
    return 0


def _print_passes(calls) -> None:
    """The voting kernels' calls (name, CPU s) grouped by pass: a pass starts at its regroup."""
    passes = []
    for name, seconds in calls:
        if name == "_regroup":
            passes.append(collections.defaultdict(list))
        if passes and name in ("_regroup", "_vote", "_scan_rows", "_turn"):
            # the turn of pass p runs just before the regroup of pass p + 1: it belongs to pass p
            passes[-1][name].append(seconds)
    print("  per pass, CPU ms (vote: one per colour; turn: the one that ends the pass)")
    for index, kernels in enumerate(passes):
        parts = [f"{name.strip('_')} {'+'.join(f'{s * 1e3:.0f}' for s in kernels[name])}"
                 for name in ("_regroup", "_vote", "_scan_rows", "_turn") if kernels[name]]
        print(f"    pass {index}: " + ", ".join(parts))


if __name__ == "__main__":
    raise SystemExit(main())
