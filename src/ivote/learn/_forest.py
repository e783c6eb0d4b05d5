"""A random forest as plain arrays: trained by scikit-learn, evaluated by NumPy.

Every tree is five arrays (the feature tested at each node, its threshold, the
left and right child, and the probability of a nucleus at the node); the
trees are concatenated, with each tree's first node in ``roots``. Evaluated
with NumPy the forest needs no scikit-learn and gives scikit-learn's
``predict_proba`` (tested): features are compared as float32, as
scikit-learn's trees compare them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._backend import cpu_threads
from ..errors import IvoteError

__all__ = ["Forest", "fit_forest"]

N_TREES = 100
MIN_SAMPLES_LEAF = 2


def _sklearn():
    try:
        from sklearn.ensemble import RandomForestClassifier
    except ImportError:  # the core runs without it; only learning needs it
        raise IvoteError("learning a detector needs scikit-learn: pip install 'napari-ivote[learn]' "
                         "(or pip install scikit-learn); applying a saved one does not") from None
    return RandomForestClassifier


@dataclass(frozen=True)
class Forest:
    feature: np.ndarray
    """(nodes,) int32 feature index tested at each node; -1 at a leaf."""
    threshold: np.ndarray
    """(nodes,) float64: a sample goes left when its (float32) feature is <= this."""
    left: np.ndarray
    """(nodes,) int32 index of the left child (global); -1 at a leaf."""
    right: np.ndarray
    value: np.ndarray
    """(nodes,) float64 probability of a nucleus at the node."""
    roots: np.ndarray
    """(trees,) int32 index of each tree's first node."""

    def probability(self, features: np.ndarray) -> np.ndarray:
        """(M,) mean over the trees of the leaf's probability of a nucleus."""
        x = np.asarray(features, dtype=np.float32).astype(np.float64)
        m = len(x)
        total = np.zeros(m)
        rows = np.arange(m)
        for root in self.roots:
            node = np.full(m, root, dtype=np.int64)
            active = self.feature[node] >= 0
            while active.any():
                at = node[active]
                go_left = x[rows[active], self.feature[at]] <= self.threshold[at]
                node[active] = np.where(go_left, self.left[at], self.right[at])
                active = self.feature[node] >= 0
            total += self.value[node]
        return total / max(len(self.roots), 1)

    def to_dict(self) -> dict:
        return {key: getattr(self, key).tolist() for key in ("feature", "threshold", "left", "right", "value", "roots")}

    @classmethod
    def from_dict(cls, data: dict) -> "Forest":
        ints = ("feature", "left", "right", "roots")
        arrays = {key: np.asarray(data[key], dtype=np.int32 if key in ints else np.float64)
                  for key in ("feature", "threshold", "left", "right", "value", "roots")}
        n = len(arrays["feature"])
        if any(len(arrays[k]) != n for k in ("threshold", "left", "right", "value")):
            raise IvoteError("detector file is damaged: the forest's node arrays differ in length")
        return cls(**arrays)


def fit_forest(features: np.ndarray, labels: np.ndarray, *, n_trees: int = N_TREES, seed: int = 0):
    """A balanced random forest on (N, F) ``features`` and (N,) bool ``labels``.

    Returns ``(Forest, out_of_bag_probability)``: the second is each sample's
    probability from the trees that did not see it (NaN where every tree did),
    used to choose the decision threshold without the training samples' own
    optimism.
    """
    classifier = _sklearn()(
        n_estimators=n_trees, min_samples_leaf=MIN_SAMPLES_LEAF, max_features="sqrt",
        class_weight="balanced_subsample", bootstrap=True, oob_score=True, random_state=seed,
        n_jobs=cpu_threads())  # the same trees on any number of threads (one seed per tree)
    import warnings

    with warnings.catch_warnings():  # a few samples without out-of-bag trees: NaN, handled by the caller
        warnings.simplefilter("ignore")
        classifier.fit(np.asarray(features, dtype=np.float32), np.asarray(labels, dtype=bool))
    oob = np.asarray(classifier.oob_decision_function_[:, 1], dtype=np.float64)
    positive = list(classifier.classes_).index(True)
    parts, offset, roots = [], 0, []
    for estimator in classifier.estimators_:
        tree = estimator.tree_
        counts = tree.value[:, 0, :]
        value = counts[:, positive] / np.maximum(counts.sum(axis=1), 1e-300)
        leaf = tree.children_left < 0
        left = np.where(leaf, -1, tree.children_left + offset)
        right = np.where(leaf, -1, tree.children_right + offset)
        parts.append((np.where(leaf, -1, tree.feature), tree.threshold, left, right, value))
        roots.append(offset)
        offset += tree.node_count
    feature, threshold, left, right, value = (np.concatenate(p) for p in zip(*parts))
    forest = Forest(feature.astype(np.int32), threshold.astype(np.float64), left.astype(np.int32),
                    right.astype(np.int32), value.astype(np.float64), np.asarray(roots, dtype=np.int32))
    return forest, oob, classifier
