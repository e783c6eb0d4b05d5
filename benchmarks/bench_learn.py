"""Time of the learned detector's steps on a 1024² synthetic image, on the CPU.

Warm-up first (Numba compiles on first use), then the median of ``--repeat`` runs of: the
candidate features (Numba reads and NumPy reads), the widened candidates, learning from the
image's true centres (the forest and the choice of threshold) and re-scoring its candidates, with
and without the search below the floor (about a quarter of the dense image's true centres have no
candidate, so the search adds its most, half as many candidates again);
beside them, in the same run, the detection itself (``iterative_voting``, every candidate and
the vote field) and scikit-image's ``blob_log`` at one sigma (the named peer).

Usage: python benchmarks/bench_learn.py [--size 1024] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time


def _median_seconds(call, repeat):
    call()  # warm-up: compilation and caches are not counted
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    import numpy as np
    from skimage.feature import blob_log

    from ivote import iterative_voting
    from ivote._backend import cpu_threads
    from ivote.data import synthetic_nuclei
    from ivote.learn import candidate_features, corrections_of, fit_detector
    from ivote.learn._candidates import widen

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    sample = synthetic_nuclei((args.size, args.size), radius=8, seed=0)
    image, radius = sample.image, 12.0
    found = iterative_voting(image, radius=radius, threshold=None, return_votes=True)
    wide, original = widen(found)
    rows = [
        ("detection (iterative_voting, every candidate, vote field)",
         _median_seconds(lambda: iterative_voting(image, radius=radius, threshold=None, return_votes=True),
                         max(1, args.repeat // 2))),
        ("blob_log, one sigma (peer)", _median_seconds(
            lambda: blob_log(image / image.max(), min_sigma=8 / 2 ** 0.5, max_sigma=8 / 2 ** 0.5, num_sigma=1),
            max(1, args.repeat // 2))),
        ("widened candidates", _median_seconds(lambda: widen(found), args.repeat)),
        ("candidate features, Numba reads", _median_seconds(
            lambda: candidate_features(image, wide, original=original, backend="auto"), args.repeat)),
        ("candidate features, NumPy reads", _median_seconds(
            lambda: candidate_features(image, wide, original=original, backend="numpy"), args.repeat)),
    ]
    corrections = corrections_of(image, found, sample.centers)
    settings = dict(radius=found.radius, spacing=found.spacing, polarity="bright", ndim=2, rgb=False,
                    tolerance=radius / 3)
    rows.append(("learning from the image (forest, threshold)",
                 _median_seconds(lambda: fit_detector([corrections], **settings), args.repeat)))
    detector = fit_detector([corrections], **settings)
    rows.append(("re-scoring the candidates (widen, features, forest, selection)",
                 _median_seconds(lambda: detector.rescore(image, found), args.repeat)))
    plain = corrections_of(image, found, sample.centers, search=False)
    rows.append(("learning without the search below the floor (search=False)",
                 _median_seconds(lambda: fit_detector([plain], **settings), args.repeat)))
    plain_detector = fit_detector([plain], **settings)
    rows.append(("re-scoring, without the search", _median_seconds(lambda: plain_detector.rescore(image, found),
                                                                  args.repeat)))
    print(f"{args.size}x{args.size} synthetic, {len(found.candidates)} candidates ({len(wide.candidates)} widened), "
          f"{len(corrections.labels)} training samples ({len(plain.labels)} without the search, which found "
          f"{corrections.n_searched - len(corrections.unmatched_points)} of {corrections.n_searched} centres with no "
          f"candidate); {platform.processor() or platform.machine()}, {cpu_threads()} threads of "
          f"{os.cpu_count()} CPUs; median of {args.repeat}")
    print("\n| step | seconds |\n| --- | --- |")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.4f} |")
    peer = rows[1][1]
    print(f"\nfeatures (Numba) / blob_log: {rows[3][1] / peer:.3f}; learn + re-score / blob_log: "
          f"{(rows[5][1] + rows[6][1]) / peer:.2f} ({(rows[7][1] + rows[8][1]) / peer:.2f} without the search); "
          f"learn + re-score: {rows[5][1] + rows[6][1]:.3f} s ({rows[7][1] + rows[8][1]:.3f} s without the search)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
