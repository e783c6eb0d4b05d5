"""Which gradients vote: voters, CPU time and accuracy against the voter floor.

A pixel votes when its gradient magnitude, quantised against the image's
largest (``plan.weight_scale`` levels), reaches ``VOTER_FLOOR`` of the largest
(``ivote.detect._plan``). This script measures, for a list of floors, in one run:

* ``synthetic``: the benchmark images of ``bench_cpu.py`` (2D 1024², radius 12,
  seed 21; 3D ``--side``³, radius 8, seed 22): the fraction of pixels that vote,
  the Numba detection's CPU time (``time.process_time``, median of
  ``--repeat``; run with ``NUMBA_NUM_THREADS=1`` for a number that moves less on
  a shared machine) and F1 against the known centres;
* ``dim``: robustness: dim nuclei (``--dim`` x the brightest) beside a few
  bright ones and a small saturated artefact (``--artefact`` x brighter):
  recall of the dim nuclei and of all nuclei;
* ``data``: every dataset of the evaluation folder (``accuracy_detect.py``'s
  loading, radius settings, tolerance, oracle and AP), every ``--every``-th
  image: voters % at every floor of ``--count-floors`` (counted from the
  detection's own blurred signal, no extra voting), then per floor of
  ``--floors`` the detection's CPU time, P/R/F1 at the default threshold, the
  oracle-threshold F1 and AP, pooled per dataset.

The floor is set in-process (``_plan.VOTER_FLOOR`` and the plan cache cleared),
so every backend sees it through ``plan.min_weight``.

Usage: NUMBA_NUM_THREADS=1 python benchmarks/studies/voter_floor.py [--parts synthetic,dim,data]
       [--floors 64,32,16] [--count-floors 64,48,32,24,16,12,8] [--every 4] [--datasets a,b]
       [--modes labels,auto] [--side 256] [--floors3d 64,16] [--out FILE]
(floors are given as denominators: 16 means 1/16).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the accuracy scripts
import accuracy_detect as acc  # noqa: E402  (same loading, tolerance, oracle and AP)

import ivote  # noqa: E402
from ivote.detect import _numba, _plan  # noqa: E402
from ivote.detect._reference import gradient  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.metrics import match_points  # noqa: E402


def set_floor(denominator: float) -> None:
    """Every plan made from now on skips voters below 1/denominator of the largest gradient."""
    _plan.VOTER_FLOOR = 1.0 / denominator
    _plan._make_plan.cache_clear()


@contextlib.contextmanager
def counting_voters(denominators):
    """Record, at each Numba voting, the pixels and the voters each floor would keep
    (counted from the signal the voting gets, as ``_reference.prepare_voters`` does)
    and the voters the voting itself kept."""
    records = []
    original = _numba.prepare_voters

    def counted(smoothed, plan, sign, largest=None, *args, **kwargs):
        result = original(smoothed, plan, sign, largest, *args, **kwargs)
        t0 = time.process_time()
        magnitude = np.sqrt(sum(g * g for g in gradient(smoothed, plan.spacing)))
        top = magnitude.max() if largest is None else largest
        quantised = np.floor(magnitude * (plan.weight_scale / top) + 0.5) if top > 0 else np.zeros_like(magnitude)
        counts = {d: int(np.count_nonzero(quantised >= max(1, int(np.ceil(plan.weight_scale / d)))))
                  for d in denominators}
        records.append({"pixels": smoothed.size, "counts": counts, "kept": len(result[0]),
                        "seconds": time.process_time() - t0})  # the counting's own time, not the detection's
        return result

    _numba.prepare_voters = counted
    try:
        yield records
    finally:
        _numba.prepare_voters = original


def synthetic_part(args, floors, lines):
    lines += ["", "## Synthetic benchmark images (bench_cpu.py's)", "",
              f"CPU: median (min) of {args.repeat} rounds, the floors alternating within each round.", "",
              "| image | floor | voters % | voters | CPU s (Numba) | CPU / 1/64's | cells | F1 |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    cases = [("2D 1024², r 12", synthetic_nuclei((1024, 1024), radius=12.0, seed=21), 12.0, 6.0, floors, args.repeat)]
    if args.side:
        cases.append((f"3D {args.side}³, r 8", synthetic_nuclei((args.side,) * 3, radius=8.0, seed=22), 8.0, 4.0,
                      [float(f) for f in args.floors3d.split(",")], args.repeat3d))
    for name, sample, radius, tol, case_floors, repeat in cases:
        crop = sample.image[tuple(slice(0, 48) for _ in sample.image.shape)]
        for d in case_floors:  # compile and cone tables, outside the timing
            set_floor(d)
            ivote.iterative_voting(crop, radius=radius, backend="numba")
        seconds = {d: [] for d in case_floors}
        results = {}
        for _ in range(repeat):
            for d in case_floors:
                set_floor(d)
                with counting_voters([d]) as records:
                    t0 = time.process_time()
                    found = ivote.iterative_voting(sample.image, radius=radius, backend="numba")
                    seconds[d].append(time.process_time() - t0 - records[-1]["seconds"])
                assert records[-1]["kept"] == records[-1]["counts"][d], "Numba's voters differ from the direct count"
                results[d] = (found, records[-1])
        base = statistics.median(seconds[case_floors[0]])
        for d in case_floors:
            found, record = results[d]
            f1 = match_points(found.points, sample.centers, tolerance=tol).f1
            median = statistics.median(seconds[d])
            _emit(lines, [name, f"1/{d:g}", f"{100 * record['kept'] / record['pixels']:.1f}", str(record["kept"]),
                          f"{median:.3f} ({min(seconds[d]):.3f})", f"{median / base:.2f}", str(len(found.points)),
                          f"{f1:.3f}"])


def dim_nuclei_image(shape=(384, 384), radius=10.0, dim=0.15, artefact=8.0, seed=3):
    """Dim nuclei (``dim`` x the bright ones' peak) beside four bright nuclei and a small
    saturated artefact ``artefact`` x brighter than them: (image, centres, is_dim)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[: shape[0], : shape[1]].astype(np.float64)
    step = 4 * radius
    centres = np.array([(y, x) for y in np.arange(2 * radius, shape[0] - 1.5 * radius, step)
                        for x in np.arange(2 * radius, shape[1] - 1.5 * radius, step)])
    centres = centres + rng.uniform(-radius / 3, radius / 3, centres.shape)
    is_dim = np.ones(len(centres), bool)
    is_dim[rng.choice(len(centres), 4, replace=False)] = False
    image = np.zeros(shape)
    for (cy, cx), faint in zip(centres, is_dim):
        r = radius * rng.uniform(0.7, 1.0)
        image += (dim if faint else 1.0) / (1 + np.exp(((yy - cy) ** 2 + (xx - cx) ** 2) ** 0.5 - r))
    if artefact:
        ay, ax = shape[0] - radius, shape[1] - radius  # a 5 px speck in a corner, away from nuclei
        image[(yy - ay) ** 2 + (xx - ax) ** 2 <= 2.5**2] = artefact
    image += rng.normal(0, 0.01 * dim, shape)
    return image, centres, is_dim


def dim_part(args, floors, lines):
    lines += ["", f"## Dim nuclei ({args.dim} x) beside bright ones and a saturated speck ({args.artefact} x the bright ones)", "",
              "Found: a detection within 5 px (one-to-one). Default: the default threshold; maxima: every local "
              "maximum passing the default contrast test (threshold none), what the voting itself finds.", "",
              "| case | floor | voters % | dim found (default) | all found (default) | dim found (maxima) "
              "| all found (maxima) | maxima |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for dim in [float(v) for v in args.dim.split(",")]:
        for artefact in [0.0] + [float(v) for v in args.artefact.split(",")]:
            image, centres, is_dim = dim_nuclei_image(dim=dim, artefact=artefact)
            for d in floors:
                set_floor(d)
                with counting_voters([d]) as records:
                    found = ivote.iterative_voting(image, radius=12.0, backend="numba")
                maxima = found.with_threshold(None, min_contrast=acc.DEFAULT_MIN_CONTRAST)
                row = [f"dim {dim:g}" + (f", speck {artefact:g}" if artefact else ", no speck"), f"1/{d:g}",
                       f"{100 * records[-1]['kept'] / records[-1]['pixels']:.1f}"]
                for points in (found.points, maxima.points):
                    hit = np.zeros(len(centres), bool)
                    hit[match_points(points, centres, tolerance=5.0).pairs[:, 1]] = True
                    row += [f"{int(hit[is_dim].sum())} / {int(is_dim.sum())}", f"{int(hit.sum())} / {len(centres)}"]
                _emit(lines, row + [str(len(maxima.points))])


class _Tally:
    def __init__(self):
        self.default = self.oracle = None
        self.curve, self.seconds, self.n, self.voters, self.pixels = [], 0.0, 0, 0, 0


def data_part(args, floors, count_floors, lines):
    data = Path(args.data)
    folders = sorted(p.parent for p in data.glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    modes = args.modes.split(",")
    lines += ["", f"## Evaluation data, every {args.every} image(s) (accuracy_detect.py's rules)", "",
              "Voters % of the pixels at each floor (first radius setting, first floor's signal):", "",
              "| dataset | images | " + " | ".join(f"1/{d:g}" for d in count_floors) + " |",
              "| --- | --- | " + " | ".join("---" for _ in count_floors) + " |"]
    detail = ["", "| dataset | radius | floor | images | nuclei | voters % | CPU s/img | P | R | F1 | oracle F1 | AP "
              "| ΔF1 | Δoracle | ΔAP |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        dataset_radius, spacing = acc.dataset_geometry(meta)
        ndim = meta["ndim"]
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        tallies = {(mode, d): _Tally() for mode in modes for d in floors}
        fractions, n_true, n_images = {d: [0, 0] for d in count_floors}, 0, 0
        for image_id, image, centers in acc.load_dataset(folder, None, args.every, 0):
            labels_path = folder / "labels" / f"{image_id}.tif"
            typical = acc.true_radius(acc.tifffile.imread(labels_path), spacing) if labels_path.exists() else np.nan
            typical = typical if np.isfinite(typical) else dataset_radius
            tol = typical / 2
            n_true += len(centers)
            n_images += 1
            for mode in modes:
                radius = acc.radius_of_mode(mode, image, typical, dataset_radius, ndim, spacing, polarity, "numba")
                if radius == "auto":  # the estimate does not depend on the floor: once per image
                    radius = ivote.detect.estimate_radius(image, spacing=spacing, polarity=polarity, backend="numba")
                for d in floors:
                    set_floor(d)
                    with counting_voters(count_floors if (mode, d) == (modes[0], floors[0]) else [d]) as records:
                        t0 = time.process_time()
                        found = ivote.iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity,
                                                       backend="numba")
                    record = records[-1]
                    seconds = time.process_time() - t0 - record["seconds"]
                    if (mode, d) == (modes[0], floors[0]):
                        for c in count_floors:
                            fractions[c][0] += record["counts"][c]
                            fractions[c][1] += record["pixels"]
                    tally = tallies[(mode, d)]
                    tally.seconds += seconds
                    tally.n += 1
                    tally.voters += record["kept"]
                    tally.pixels += record["pixels"]
                    acc.add_scores(tally, found, centers, tol, spacing)
        _emit(lines, [folder.name, str(n_images)] + [f"{100 * v / max(p, 1):.1f}" for v, p in fractions.values()])
        for mode in modes:
            base = tallies[(mode, floors[0])]
            base_ap = acc._pooled_ap(base.curve)
            for d in floors:
                t = tallies[(mode, d)]
                ap = acc._pooled_ap(t.curve) if d != floors[0] else base_ap
                row = [folder.name, mode, f"1/{d:g}", str(t.n), str(n_true), f"{100 * t.voters / max(t.pixels, 1):.1f}",
                       f"{t.seconds / t.n:.3f}", f"{t.default.precision:.3f}", f"{t.default.recall:.3f}",
                       f"**{t.default.f1:.3f}**", f"{t.oracle.f1:.3f}", f"{ap:.3f}",
                       f"{t.default.f1 - base.default.f1:+.3f}", f"{t.oracle.f1 - base.oracle.f1:+.3f}",
                       f"{ap - base_ap:+.3f}"]
                _emit(detail, row)
    lines += detail


def _emit(lines, row):
    line = "| " + " | ".join(row) + " |"
    lines.append(line)
    print(line, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="synthetic,dim,data")
    parser.add_argument("--floors", default="64,32,16", help="denominators; the first is the baseline")
    parser.add_argument("--count-floors", default="64,48,32,24,16,12,8", help="denominators, voters counted only")
    parser.add_argument("--data", default=str(acc.DEFAULT_DATA))
    parser.add_argument("--datasets", default=None)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--modes", default="labels,auto")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--side", type=int, default=256, help="3D synthetic side (0: no 3D)")
    parser.add_argument("--floors3d", default="64,16")
    parser.add_argument("--repeat3d", type=int, default=1)
    parser.add_argument("--dim", default="0.1,0.15,0.2", help="dim nuclei's brightness relative to the bright ones")
    parser.add_argument("--artefact", default="5,10", help="speck brightness relative to the bright nuclei")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    floors = [float(f) for f in args.floors.split(",")]
    count_floors = [float(f) for f in args.count_floors.split(",")]
    parts = args.parts.split(",")
    lines = [f"# Voter floor ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"Numba, {_numba_threads()} thread(s); CPU = process time (all threads)."]
    print("\n".join(lines), flush=True)
    try:
        if "synthetic" in parts:
            synthetic_part(args, floors, lines)
        if "dim" in parts:
            dim_part(args, floors, lines)
        if "data" in parts:
            data_part(args, floors, count_floors, lines)
    finally:
        set_floor(1.0 / _DEFAULT_FLOOR)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


_DEFAULT_FLOOR = _plan.VOTER_FLOOR


def _numba_threads() -> int:
    import numba

    return numba.get_num_threads()


if __name__ == "__main__":
    sys.exit(main())
