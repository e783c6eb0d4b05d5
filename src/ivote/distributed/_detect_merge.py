"""The global decisions of a chunked detection, over every block's maxima at once:
the suppression of maxima closer than the radius across seams, then the
threshold rule and the contrast test, as in memory."""

from __future__ import annotations

import numpy as np


def _suppress(coords, values, contrast, shape, plan):
    """All blocks' maxima best first (ties: lower flat index of the whole image),
    then the greedy scan over maxima closer than the radius, as in memory."""
    from ..detect._reference import close_pairs
    from ..detect._cells import _greedy_keep

    flat = np.ravel_multi_index(tuple(coords.T), shape) if len(coords) else np.zeros(0, np.int64)
    order = np.lexsort((flat, -values.astype(np.int64)))
    coords, values, contrast = coords[order], values[order], contrast[order]
    keep = _greedy_keep(len(coords), close_pairs(coords, plan))
    return coords[keep], values[keep], contrast[keep]


def _detections(candidates, scores, contrast, plan, threshold, min_contrast, n_passes, backend, spacing, estimated):
    from ..detect._detections import Detections
    from ..detect._thresholds import _resolve_rule

    requested = min_contrast
    value, min_contrast = _resolve_rule(threshold, scores, contrast, min_contrast)  # 'auto' may raise the floor
    keep = (scores >= value) & (contrast >= min_contrast)
    return Detections(points=candidates[keep], scores=scores[keep], threshold=value, candidates=candidates,
                      candidate_scores=scores, candidate_contrasts=contrast, min_contrast=min_contrast,
                      vote_field=None, n_passes=n_passes, backend=backend, radius=plan.radius, spacing=spacing,
                      radius_estimated=estimated, requested_min_contrast=requested)
