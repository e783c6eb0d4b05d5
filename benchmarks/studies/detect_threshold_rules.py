"""Threshold rules against the per-image oracle, from candidates dumped by accuracy_detect.py.

``python benchmarks/accuracy_detect.py --dump DIR`` writes every image's local
maxima (scores, contrasts, positions, the truth, the tolerance) once per radius
setting; this script applies each rule to them offline, all datasets in one
run, and prints pooled F1 per dataset and radius setting. Oracle: each image's
best score threshold over the maxima passing the default contrast test
(counts pooled), as in accuracy_detect.py.

Rules: ``otsu`` (Otsu's threshold of the log scores of every maximum, the
earlier default), ``reference`` (:func:`ivote.detect.reference_threshold`),
``auto`` (:func:`ivote.detect.auto_threshold`, the default) and its two parts
alone: ``auto score`` (its score threshold, contrast >= 3) and ``otsu +
contrast split`` (Otsu's score threshold, its contrast floor); ``auto
09:40``: the default of 2026-11-24 09:40, before the rules for images of
fewer than 50 maxima (no contrast split there at all, no score gap) and with
Otsu's threshold at its histogram bin's centre. (The columns ``auto
before`` and ``texture, any split`` of the earlier studies are in
``benchmarks/results/detect_threshold.md``.)

``--errors`` adds, per dataset and radius setting, where the default rule's
errors are (labels from ``--data``): false positives on the background,
inside a labelled nucleus that no detection matched (off its centre by more
than the tolerance) or inside one already matched (a second maximum), and
false negatives; and the same counts at the per-image oracle threshold.

Usage: python benchmarks/studies/detect_threshold_rules.py DIR [--errors] [--data DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the accuracy scripts
from accuracy_detect import DEFAULT_DATA, oracle_match  # noqa: E402

from ivote.detect import auto_threshold, otsu_threshold, reference_threshold  # noqa: E402
from ivote.detect._thresholds import _separability, _threshold_otsu  # noqa: E402
from ivote.metrics import match_points  # noqa: E402

MIN_CONTRAST = 3.0


def _otsu(scores, contrasts):
    return otsu_threshold(scores), MIN_CONTRAST


def _reference(scores, contrasts):
    return reference_threshold(scores, contrasts, MIN_CONTRAST), MIN_CONTRAST


def _auto(scores, contrasts):
    return auto_threshold(scores, contrasts, MIN_CONTRAST)


def _auto_score(scores, contrasts):
    return auto_threshold(scores, contrasts, MIN_CONTRAST)[0], MIN_CONTRAST


def _otsu_contrast_split(scores, contrasts):
    return otsu_threshold(scores), auto_threshold(scores, contrasts, MIN_CONTRAST)[1]


def _auto_0940(scores, contrasts):
    """``auto`` of 2026-11-24 09:40: the contrast split only among at least 50 maxima (Otsu's
    eta >= 0.75, at least 5 below), Otsu's score threshold at its bin's centre, no score gap."""
    measurable = contrasts[np.isfinite(contrasts) & (contrasts > 0)]
    floor = MIN_CONTRAST
    if len(measurable) >= 50 and measurable.min() < measurable.max():
        logs = np.log(measurable)
        split = _threshold_otsu(logs) + (logs.max() - logs.min()) / 512
        if np.sum(logs < split) >= 5 and _separability(logs, split) >= 0.75:
            floor = max(floor, float(np.exp(split)))
    value = otsu_threshold(scores)
    textured = floor > MIN_CONTRAST and np.mean(measurable < floor) >= 1 / 6
    upper = scores[(contrasts >= (floor if textured else MIN_CONTRAST)) & (scores >= value)]
    if len(upper) and textured:
        value = 0.4 * float(np.median(upper))
    elif len(upper):
        value = min(value, 0.3 * float(np.median(upper)))
    return value, floor


RULES = {"otsu": _otsu, "reference": _reference, "auto score": _auto_score,
         "otsu + contrast split": _otsu_contrast_split, "auto 09:40": _auto_0940, "auto": _auto}

ERROR_KINDS = ("FP background", "FP off-centre", "FP second", "FN")


def error_kinds(points, match, labels) -> dict:
    """Counts of ``ERROR_KINDS`` for detections ``points`` matched by ``match``; row k
    of the truth is label k + 1 (the data folder's convention)."""
    matched_points = np.zeros(len(points), bool)
    matched_points[match.pairs[:, 0]] = True
    matched_labels = set((match.pairs[:, 1] + 1).tolist())
    at = labels[tuple(np.round(points[~matched_points]).astype(int).T)]
    counts = dict.fromkeys(ERROR_KINDS, 0)
    counts["FP background"] = int(np.sum(at == 0))
    inside = at[at > 0]
    second = np.isin(inside, list(matched_labels))
    counts["FP second"] = int(second.sum())
    counts["FP off-centre"] = int((~second).sum())
    counts["FN"] = match.n_true - match.true_positives
    return counts


def _oracle_points(points, scores, centers, tol, spacing, max_thresholds=100):
    """The points kept at the oracle threshold (``accuracy_detect.oracle_match``'s), and their match."""
    best = (match_points(points[:0], centers, tolerance=tol, spacing=spacing), points[:0])
    thresholds = np.unique(scores)
    if len(thresholds) > max_thresholds:
        thresholds = np.unique(np.quantile(scores, np.linspace(0, 1, max_thresholds)))
    for t in thresholds:
        m = match_points(points[scores >= t], centers, tolerance=tol, spacing=spacing)
        if m.f1 > best[0].f1:
            best = (m, points[scores >= t])
    return best[1], best[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump")
    parser.add_argument("--out", default=None)
    parser.add_argument("--errors", action="store_true", help="where the errors are (needs the labels)")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="evaluation data folder (for --errors)")
    args = parser.parse_args(argv)
    groups = defaultdict(list)
    for path in sorted(Path(args.dump).glob("*.npz")):
        dataset, _, mode = path.stem.split("__")
        groups[(dataset, mode)].append(path)
    if not groups:
        print(f"no dumps under {args.dump}", file=sys.stderr)
        return 1
    names = list(RULES)
    lines = ["| dataset | radius | images | oracle | " + " | ".join(names) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in names) + " |"]
    print("\n".join(lines), flush=True)
    gaps = defaultdict(list)
    error_rows = []
    for (dataset, mode), paths in sorted(groups.items()):
        totals = dict.fromkeys(["oracle", *names])
        errors = {"auto": dict.fromkeys(ERROR_KINDS, 0), "oracle": dict.fromkeys(ERROR_KINDS, 0)}
        for path in paths:
            z = np.load(path)
            points, scores, contrasts = z["candidates"], z["scores"], z["contrasts"]
            centers, tol, spacing = z["centers"], float(z["tolerance"]), tuple(z["spacing"])
            passing = contrasts >= MIN_CONTRAST
            matches = {"oracle": oracle_match(points[passing], scores[passing], centers, tol, spacing)}
            for name, rule in RULES.items():
                value, floor = rule(scores, contrasts)
                keep = (scores >= value) & (contrasts >= floor)
                matches[name] = match_points(points[keep], centers, tolerance=tol, spacing=spacing)
            for name, m in matches.items():
                totals[name] = m if totals[name] is None else totals[name] + m
            labels_path = Path(args.data) / dataset / "labels" / f"{path.stem.split('__')[1]}.tif"
            if args.errors and labels_path.exists():
                labels = tifffile.imread(labels_path)
                value, floor = _auto(scores, contrasts)
                keep = (scores >= value) & (contrasts >= floor)
                kept, m = _oracle_points(points[passing], scores[passing], centers, tol, spacing)
                for name, (where, match) in {"auto": (points[keep], matches["auto"]), "oracle": (kept, m)}.items():
                    for kind, n in error_kinds(where, match, labels).items():
                        errors[name][kind] += n
        if args.errors:
            error_rows.append(f"| {dataset} | {mode} | "
                              + " | ".join(f"{errors['auto'][k]} / {errors['oracle'][k]}" for k in ERROR_KINDS) + " |")
        for name in names:
            gaps[name].append(totals["oracle"].f1 - totals[name].f1)
        line = (f"| {dataset} | {mode} | {len(paths)} | {totals['oracle'].f1:.4f} | "
                + " | ".join(f"{totals[n].f1:.4f}" for n in names) + " |")
        lines.append(line)
        print(line, flush=True)
    line = "| largest gap to the oracle | | | | " + " | ".join(f"{max(gaps[n]):.4f}" for n in names) + " |"
    lines.append(line)
    print(line)
    if error_rows:
        header = ["", "Errors of `auto` / at the oracle threshold (counts pooled over the images):", "",
                  "| dataset | radius | " + " | ".join(ERROR_KINDS) + " |",
                  "| --- | --- | " + " | ".join("---" for _ in ERROR_KINDS) + " |"]
        lines += header + error_rows
        print("\n".join(header + error_rows))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
