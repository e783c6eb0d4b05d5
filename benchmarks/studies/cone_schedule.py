"""The cone schedule: voting work, accuracy and CPU time of faster-narrowing schedules.

The voting's full cone angle phi starts at pi/2 and halves each pass until it is
under one pixel wide at the radius (``ivote.detect._plan.cone_angles``: 6 passes
at 2D radius 12, 5 at 3D radius 8). A schedule that narrows faster has fewer
passes, and the narrow cones are cheaper too. This script measures, per
candidate schedule (``SCHEDULES``; ``--schedules`` picks some, the first is the
baseline), in one run:

* ``work``: the passes' angles and the voting work per voter in *items* (runs
  of a cone's offsets along the last axis, cut at the sparse table's longest
  run, 16 in 2D and 8 in 3D, as ``_numba._entries`` does), from
  ``_run_tables.discrete_runs`` averaged over the offset directions: every pass
  votes, passes 0..n-2 also turn (with their own cones), for 2D radius 12 and
  3D radius 8;
* ``parity``: the Numba vote field equals the vectorised NumPy path's
  (``_cpu.run_passes``) for every schedule, 2D and 3D, small images (the
  evaluation below uses Numba);
* ``synthetic``: F1 (default threshold, and oracle) on synthetic nuclei of known
  centres, radius 4-20 pixels in 2D, 5-8 in 3D (``SYNTHETIC_CASES``, ``--seeds``
  images each);
* ``data``: every dataset of the evaluation folder with ``accuracy_detect.py``'s
  loading, per-image radius from the labels (``--mode auto``: estimated), tolerance, oracle threshold and AP:
  pooled P/R/F1 at the default threshold ('auto'), the oracle-threshold F1 and
  AP, every ``--every``-th image (the same images for every schedule);
* ``cpu``: CPU time (``time.process_time``) of the Numba detection of
  ``bench_cpu.py``'s images (2D 1024², radius 12, seed 21; 3D ``--side``³,
  radius 8, seed 22), each schedule in a fresh process after one untimed run
  (compilation and tables), schedules alternating within each of ``--rounds``
  rounds. Run with ``NUMBA_NUM_THREADS=1`` (the child processes inherit it): the
  host's speed drifts, so compare only within a round.

The schedule is swapped in-process: ``_plan.cone_angles`` is replaced and every
memoized table of ``ivote.detect`` cleared (they are keyed on radius, spacing
and ndim only), so every backend sees the schedule through ``plan.cos_half32``.

Usage: NUMBA_NUM_THREADS=1 python benchmarks/studies/cone_schedule.py [--parts work,parity,synthetic,data,cpu]
       [--schedules halve,third,quarter,...] [--every 1] [--datasets a,b] [--mode labels|auto] [--rounds 5]
       [--side 128] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the accuracy scripts
import accuracy_detect as acc  # noqa: E402  (same loading, radius from labels, tolerance, oracle and AP)

import ivote  # noqa: E402
from ivote.data import synthetic_nuclei  # noqa: E402
from ivote.detect import _plan  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

_CURRENT = _plan.cone_angles


def _drop(angles, index):
    """The schedule without pass ``index`` (kept when it is the first or the last)."""
    if 0 < index < len(angles) - 1:
        return angles[:index] + angles[index + 1:]
    return angles


SCHEDULES = {
    "halve": _CURRENT,
    "third": lambda r: _CURRENT(r, narrowing=3.0),
    "quarter": lambda r: _CURRENT(r, narrowing=4.0),
    "halve-from-45": lambda r: _CURRENT(r, first=math.pi / 4),
    "halve-drop-3rd": lambda r: _drop(_CURRENT(r), 2),
    "divide-2.5": lambda r: _CURRENT(r, narrowing=2.5),
}
"""Schedules by name: radius in pixels of the finest axis -> full cone angles (radians)."""

SYNTHETIC = {2: ((1024, 1024), 12.0, 21), 3: (None, 8.0, 22)}
"""bench_cpu.py's images: shape (3D: --side), radius, seed."""


def use_schedule(name: str) -> None:
    """Every plan made from now on has the schedule ``name`` (and no table of another survives)."""
    _install(SCHEDULES[name])


def _install(cone_angles) -> None:
    _plan.cone_angles = cone_angles
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("ivote.detect") and module is not None:
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
    ivote.free_gpu_memory()  # the GPU's cone tables and captured detections (not lru caches); no-op without CuPy


def _emit(lines, row):
    line = "| " + " | ".join(row) + " |"
    lines.append(line)
    print(line, flush=True)


def _degrees(angles):
    return ", ".join(f"{math.degrees(a):.3g}" for a in angles)


def items_per_voter(radius: float, ndim: int):
    """Per pass, the mean number of items of a cone (over the offset directions),
    runs cut at the sparse table's longest as ``_numba._entries`` cuts them."""
    from ivote.detect._numba import _TOP_LEVELS
    from ivote.detect._run_tables import discrete_runs, split_runs

    spacing = (1.0,) * ndim
    plan = _plan.make_plan(radius, spacing, ndim)
    per_pass = []
    for index in range(plan.n_passes):
        starts, first, length = split_runs(*discrete_runs(radius, spacing, ndim, index), 2 ** (_TOP_LEVELS[ndim] + 1))
        per_pass.append(len(first) / len(plan.offsets))
    return plan, per_pass


def work_part(args, names, lines):
    lines += ["", "## Voting work per voter (items: cone runs, cut at 16 px in 2D, 8 in 3D)", "",
              "vote: every pass; turn: passes 0..n-2 (each with its own cone). Mean over offset directions.", "",
              "| schedule | case | passes | phi (degrees) | items per pass (vote) | vote | turn | vote + turn "
              "| / halving's |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    totals = {}
    for ndim, radius in ((2, 12.0), (3, 8.0)):
        for name in names:
            use_schedule(name)
            plan, per_pass = items_per_voter(radius, ndim)
            vote, turn = sum(per_pass), sum(per_pass[:-1])
            totals[(name, ndim)] = vote + turn
            base = totals[(names[0], ndim)]
            _emit(lines, [name, f"{ndim}D r {radius:g}", str(plan.n_passes), _degrees(plan.cone_angles),
                          ", ".join(f"{v:.1f}" for v in per_pass), f"{vote:.1f}", f"{turn:.1f}",
                          f"**{vote + turn:.1f}**", f"{(vote + turn) / base:.2f}"])
    return totals


def parity_part(args, names, lines):
    from ivote.detect import _cpu, _numba

    cases = [(synthetic_nuclei((96, 96), radius=7.0, seed=5).image, 7.0, (1.0, 1.0)),
             (synthetic_nuclei((24, 40, 40), radius=5.0, spacing=(2.0, 1.0, 1.0), seed=6).image, 5.0, (2.0, 1.0, 1.0))]
    lines += ["", "## Parity: Numba's vote field equals the NumPy path's for every schedule", ""]
    for name in names:
        use_schedule(name)
        for image, radius, spacing in cases:
            plan = _plan.make_plan(radius, spacing, image.ndim)
            smoothed = image.astype(np.float64)
            expected = _cpu.run_passes(smoothed.copy(), plan, 1.0)
            got = _numba.run_passes([smoothed.copy()], plan, 1.0)
            if not np.array_equal(expected, got):
                raise AssertionError(f"schedule {name}: Numba differs from NumPy ({image.ndim}D)")
        lines.append(f"* {name}: identical (2D 96², 3D 24x40x40, {plan.n_passes} passes in 3D)")
        print(lines[-1], flush=True)


SYNTHETIC_CASES = [  # shape, radius (physical), spacing, seed
    ((192, 192), 4.0, None, 31), ((256, 256), 6.0, None, 32), ((384, 384), 9.0, None, 33),
    ((512, 512), 14.0, None, 34), ((768, 768), 20.0, None, 35),
    ((48, 64, 64), 5.0, None, 36), ((64, 96, 96), 8.0, None, 37), ((32, 96, 96), 6.0, (2.0, 1.0, 1.0), 38),
]
"""Synthetic nuclei of known centres over a range of radii (pixels of the finest axis 4-20)."""


def synthetic_part(args, names, lines):
    lines += ["", f"## Synthetic nuclei of known centres (tolerance radius / 2), {args.seeds} image(s) each, pooled", "",
              "| image | radius | " + " | ".join(f"{n}: passes, F1 (auto) / oracle" for n in names) + " |",
              "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    print("\n".join(lines[-4:]), flush=True)
    for shape, radius, spacing, seed in SYNTHETIC_CASES:
        row = ["x".join(map(str, shape)) + (f", spacing {spacing}" if spacing else ""), f"{radius:g}"]
        tallies = {name: acc.Tally() for name in names}
        for index in range(args.seeds):  # the same images for every schedule, counts pooled
            sample = synthetic_nuclei(shape, radius=radius, spacing=spacing, seed=seed + 1000 * index)
            for name in names:
                use_schedule(name)
                found = ivote.iterative_voting(sample.image, radius=radius, spacing=spacing, backend="numba")
                acc.add_scores(tallies[name], found, sample.centers, radius / 2, spacing)
                tallies[name].n = found.n_passes
        row += [f"{t.n}, {t.default.f1:.3f} / {t.oracle.f1:.3f}" for t in tallies.values()]
        _emit(lines, row)


def data_part(args, names, lines):
    data = Path(args.data)
    folders = sorted(p.parent for p in data.glob("*/meta.json"))
    if args.datasets:
        folders = [f for f in folders if f.name in set(args.datasets.split(","))]
    lines += ["", f"## Evaluation data (accuracy_detect.py's rules, radius setting {args.mode!r}, Numba), every "
              f"{args.every} image(s)", "",
              "| dataset | schedule | images | nuclei | P | R | F1 (auto) | oracle F1 | AP | ΔF1 | Δoracle | ΔAP "
              "| CPU s/img (with the tables) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines[-4:]), flush=True)
    summary = {}
    for folder in folders:
        meta = json.loads((folder / "meta.json").read_text())
        dataset_radius, spacing = acc.dataset_geometry(meta)
        ndim = meta["ndim"]
        polarity = meta["polarity"] if meta["channels"] == 1 else "bright"
        tallies = {name: acc.Tally() for name in names}
        n_true = 0
        for image_id, image, centers in acc.load_dataset(folder, args.max_images, args.every, 0):
            labels_path = folder / "labels" / f"{image_id}.tif"
            typical = acc.true_radius(acc.tifffile.imread(labels_path), spacing) if labels_path.exists() else np.nan
            typical = typical if np.isfinite(typical) else dataset_radius
            tol = typical / 2
            n_true += len(centers)
            radius = acc.radius_of_mode(args.mode, image, typical, dataset_radius, ndim, spacing, polarity, "numba")
            if radius == "auto":  # the estimate does not depend on the schedule: once per image
                radius = ivote.detect.estimate_radius(image, spacing=spacing, polarity=polarity, backend="numba")
            for name in names:
                use_schedule(name)
                t0 = time.process_time()
                found = ivote.iterative_voting(image, radius=radius, spacing=spacing, polarity=polarity,
                                               backend="numba")
                tally = tallies[name]
                tally.seconds += time.process_time() - t0
                tally.n += 1
                acc.add_scores(tally, found, centers, tol, spacing)
        base = tallies[names[0]]
        base_ap = acc._pooled_ap(base.curve)
        for name in names:
            t = tallies[name]
            ap = acc._pooled_ap(t.curve) if name != names[0] else base_ap
            summary[(folder.name, name)] = (t.default.f1, t.oracle.f1, ap, t.n)
            _emit(lines, [folder.name, name, str(t.n), str(n_true), f"{t.default.precision:.3f}",
                          f"{t.default.recall:.3f}", f"**{t.default.f1:.3f}**", f"{t.oracle.f1:.3f}", f"{ap:.3f}",
                          f"{t.default.f1 - base.default.f1:+.3f}", f"{t.oracle.f1 - base.oracle.f1:+.3f}",
                          f"{ap - base_ap:+.3f}", f"{t.seconds / t.n:.3f}"])
    return summary


def _time_one(name: str, ndim: int, side: int):
    """CPU seconds of one detection of the synthetic image, after an untimed run (in this
    process), and its F1 against the known centres (within half the radius)."""
    shape, radius, seed = SYNTHETIC[ndim]
    sample = synthetic_nuclei(shape or (side,) * 3, radius=radius, seed=seed)
    use_schedule(name)
    ivote.iterative_voting(sample.image, radius=radius, backend="numba")  # compile, tables
    t0 = time.process_time()
    found = ivote.iterative_voting(sample.image, radius=radius, backend="numba")
    seconds = time.process_time() - t0
    return seconds, match_points(found.points, sample.centers, tolerance=radius / 2).f1


def cpu_part(args, names, lines):
    cases = [2] + ([3] if args.side else [])
    seconds = {(name, ndim): [] for name in names for ndim in cases}
    f1s = {}
    for round_index in range(args.rounds):
        order = names if round_index % 2 == 0 else names[::-1]  # alternate, and reverse the order every round
        for ndim in cases:
            for name in order:
                out = subprocess.run([sys.executable, __file__, "--time-one", name, "--ndim", str(ndim),
                                      "--side", str(args.side)], capture_output=True, text=True, check=True)
                took, f1 = (float(v) for v in out.stdout.split()[-2:])
                seconds[(name, ndim)].append(took)
                f1s[(name, ndim)] = f1
        print(f"round {round_index + 1}: " + ", ".join(f"{n} {ndim}D {seconds[(n, ndim)][-1]:.3f}"
                                                       for ndim in cases for n in names), flush=True)
    threads = os.environ.get("NUMBA_NUM_THREADS", "(default)")
    lines += ["", f"## CPU time, Numba, NUMBA_NUM_THREADS={threads}, fresh process per run, {args.rounds} rounds",
              "", "CPU = process time of the second detection in the process; ratio = per round against the "
              "baseline's run of the same round (median, min-max).", "",
              "| schedule | image | CPU s median (min-max) | / baseline, per round: median (min-max) | F1 |",
              "| --- | --- | --- | --- | --- |"]
    for ndim in cases:
        label = "2D 1024², r 12" if ndim == 2 else f"3D {args.side}³, r 8"
        for name in names:
            runs = seconds[(name, ndim)]
            ratios = [a / b for a, b in zip(runs, seconds[(names[0], ndim)])]
            _emit(lines, [name, label, f"{statistics.median(runs):.3f} ({min(runs):.3f}-{max(runs):.3f})",
                          f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})",
                          f"{f1s[(name, ndim)]:.3f}"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="work,parity,synthetic,data,cpu")
    parser.add_argument("--schedules", default="halve,third,quarter,halve-from-45,halve-drop-3rd",
                        help=f"comma-separated, the first is the baseline; known: {', '.join(SCHEDULES)}")
    parser.add_argument("--data", default=str(acc.DEFAULT_DATA))
    parser.add_argument("--datasets", default=None)
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--mode", default="labels", help="data's radius setting (accuracy_detect.py): labels or auto")
    parser.add_argument("--max-images", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=1, help="synthetic images per case (seeds)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--side", type=int, default=128, help="3D synthetic side for the CPU time (0: no 3D)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--time-one", default=None, help=argparse.SUPPRESS)  # child process of the cpu part
    parser.add_argument("--ndim", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.schedules.split(",")
    unknown = [n for n in names if n not in SCHEDULES]
    if unknown:
        parser.error(f"--schedules: unknown {', '.join(unknown)}; known: {', '.join(SCHEDULES)}")
    if args.time_one:
        seconds, f1 = _time_one(args.time_one, args.ndim, args.side)
        print(f"{seconds:.6f} {f1:.6f}")
        return 0
    parts = args.parts.split(",")
    lines = [f"# Cone schedule ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"Schedules: {', '.join(names)} (baseline {names[0]}); Numba backend."]
    print("\n".join(lines), flush=True)
    runs = {"work": work_part, "parity": parity_part, "synthetic": synthetic_part, "data": data_part,
            "cpu": cpu_part}
    unknown = [part for part in parts if part not in runs]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; known: {', '.join(runs)}")
    try:
        for part, run in runs.items():
            if part in parts:
                run(args, names, lines)
    finally:
        _install(_CURRENT)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
