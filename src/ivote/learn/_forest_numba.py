"""The forest's evaluation as a compiled loop (Numba): equal to ``_forest.Forest.probability``'s
NumPy walk (the same comparisons, the trees summed in the same order), without its per-level
passes over every sample."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["out_of_bag_sums", "probability_sums"]


@njit(nogil=True, cache=True, inline="always")
def _leaf(feature, threshold, left, right, x, m, node):
    while feature[node] >= 0:
        if x[m, feature[node]] <= threshold[node]:
            node = left[node]
        else:
            node = right[node]
    return node


@njit(nogil=True, cache=True)
def _probability_sums(feature, threshold, left, right, value, roots, x, total):
    for m in range(x.shape[0]):
        acc = 0.0
        for t in range(roots.shape[0]):
            acc += value[_leaf(feature, threshold, left, right, x, m, roots[t])]
        total[m] = acc


@njit(nogil=True, cache=True)
def _out_of_bag_sums(feature, threshold, left, right, value, roots, x, out_of_bag, total, count):
    for m in range(x.shape[0]):
        acc = 0.0
        n = 0
        for t in range(roots.shape[0]):
            if out_of_bag[t, m]:
                acc += value[_leaf(feature, threshold, left, right, x, m, roots[t])]
                n += 1
        total[m] = acc
        count[m] = n


def probability_sums(forest, x: np.ndarray) -> np.ndarray:
    """(M,) sum over the trees of the leaf's probability, ``x`` (M, F) float64."""
    total = np.empty(len(x), dtype=np.float64)
    _probability_sums(forest.feature, forest.threshold, forest.left, forest.right, forest.value, forest.roots,
                      np.ascontiguousarray(x), total)
    return total


def out_of_bag_sums(forest, x: np.ndarray, out_of_bag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sum, count) over the trees with ``out_of_bag[tree, sample]`` of the leaf's probability."""
    total = np.empty(len(x), dtype=np.float64)
    count = np.empty(len(x), dtype=np.int64)
    _out_of_bag_sums(forest.feature, forest.threshold, forest.left, forest.right, forest.value, forest.roots,
                     np.ascontiguousarray(x), np.ascontiguousarray(out_of_bag), total, count)
    return total, count
