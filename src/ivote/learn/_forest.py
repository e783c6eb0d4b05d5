"""A random forest as plain arrays: trained by scikit-learn's trees, evaluated by NumPy or Numba.

Every tree is five arrays (the feature tested at each node, its threshold, the
left and right child, and the probability of a nucleus at the node); the
trees are concatenated, with each tree's first node in ``roots``. Evaluated
with NumPy (or the equal Numba loop, ``_forest_numba``) the forest needs no
scikit-learn and gives scikit-learn's ``predict_proba`` (tested): features are
compared as float32, as scikit-learn's trees compare them.

:func:`fit_forest` grows the trees of scikit-learn's
``RandomForestClassifier(class_weight="balanced_subsample", bootstrap=True)``
itself (the same seeds, bootstrap samples and class weights, so the same trees
and out-of-bag probabilities, tested), one ``DecisionTreeClassifier`` each on
a pool of threads: the ensemble's per-tree checks and its out-of-bag pass
through ``predict_proba`` cost about twice the growing of the trees on a
1024² image's few thousand candidates.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .._backend import cpu_threads, use_numba
from ..errors import IvoteError

__all__ = ["Forest", "fit_forest"]

N_TREES = 100
MIN_SAMPLES_LEAF = 2
_MAX_SEED = np.iinfo(np.int32).max  # scikit-learn's per-tree seeds lie below it


def _sklearn_tree():
    try:
        from sklearn.tree import DecisionTreeClassifier
    except ImportError:  # the core runs without it; only learning needs it
        raise IvoteError("learning a detector needs scikit-learn: pip install 'napari-ivote[learn]' "
                         "(or pip install scikit-learn); applying a saved one does not") from None
    return DecisionTreeClassifier


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

    def probability(self, features: np.ndarray, *, backend: str = "auto") -> np.ndarray:
        """(M,) mean over the trees of the leaf's probability of a nucleus ('numba', the default
        on the CPU, walks the trees in a compiled loop; 'numpy' level by level; equal)."""
        x = _as_compared(features)
        if use_numba(np, backend):
            from ._forest_numba import probability_sums

            total = probability_sums(self, x)
        else:
            total = np.zeros(len(x))
            for root in self.roots:
                total += self.value[self._leaves(x, root)]
        return total / max(len(self.roots), 1)

    def out_of_bag(self, features: np.ndarray, out_of_bag: np.ndarray, *, backend: str = "auto") -> np.ndarray:
        """(M,) mean of the leaf's probability over the trees with ``out_of_bag[tree, sample]``
        (the trees that did not see the sample); NaN where every tree saw it."""
        x = _as_compared(features)
        out_of_bag = np.asarray(out_of_bag, dtype=bool)
        if use_numba(np, backend):
            from ._forest_numba import out_of_bag_sums

            total, count = out_of_bag_sums(self, x, out_of_bag)
        else:
            total, count = np.zeros(len(x)), np.zeros(len(x), dtype=np.int64)
            for root, unseen in zip(self.roots, out_of_bag):
                rows = np.flatnonzero(unseen)
                total[rows] += self.value[self._leaves(x[rows], root)]
                count[rows] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    def _leaves(self, x: np.ndarray, root: int) -> np.ndarray:
        """(M,) the leaf of one tree that each row of ``x`` reaches."""
        rows = np.arange(len(x))
        node = np.full(len(x), root, dtype=np.int64)
        active = self.feature[node] >= 0
        while active.any():
            at = node[active]
            go_left = x[rows[active], self.feature[at]] <= self.threshold[at]
            node[active] = np.where(go_left, self.left[at], self.right[at])
            active = self.feature[node] >= 0
        return node

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


def _as_compared(features) -> np.ndarray:
    """Features as the trees compare them: float32 values, as float64."""
    return np.asarray(features, dtype=np.float32).astype(np.float64)


def _balanced_subsample_weights(classes: np.ndarray, in_bag: np.ndarray) -> np.ndarray:
    """Each sample's weight in one tree: how often the bootstrap drew it times its class's
    weight in the bootstrap sample, n / (classes present x the class's count) (0 for a class
    the sample lacks), as ``compute_sample_weight('balanced', y, indices=in_bag)`` computes it."""
    drawn = np.bincount(classes[in_bag], minlength=2)
    present = drawn > 0
    class_weight = np.zeros(2)
    class_weight[present] = len(in_bag) / (int(present.sum()) * drawn[present].astype(np.float64))
    return np.bincount(in_bag, minlength=len(classes)) * class_weight[classes]


def fit_forest(features: np.ndarray, labels: np.ndarray, *, n_trees: int = N_TREES, seed: int = 0,
               backend: str = "auto"):
    """A balanced random forest on (N, F) ``features`` and (N,) bool ``labels``.

    The trees of ``RandomForestClassifier(n_estimators=n_trees, min_samples_leaf=2,
    max_features='sqrt', class_weight='balanced_subsample', random_state=seed)``, grown on as
    many threads as ``ivote._backend.cpu_threads`` (the same trees on any number).

    Returns ``(Forest, out_of_bag_probability)``: the second is each sample's
    probability from the trees that did not see it (NaN where every tree did),
    used to choose the decision threshold without the training samples' own
    optimism.
    """
    DecisionTreeClassifier = _sklearn_tree()
    x = np.ascontiguousarray(features, dtype=np.float32)
    labels = np.asarray(labels, dtype=bool)
    n = len(x)
    if len(x) != len(labels) or labels.all() or not labels.any():
        raise IvoteError(f"a forest needs samples of both classes, one label per sample; got {len(labels)} labels "
                         f"({int(labels.sum())} nuclei) for {len(x)} samples")
    classes = labels.astype(np.int64)  # False, True: the classes in scikit-learn's order
    target = classes.astype(np.float64).reshape(-1, 1)
    seeds = np.random.RandomState(seed)
    tree_seeds = [int(seeds.randint(_MAX_SEED)) for _ in range(n_trees)]  # one draw per tree, in order

    def grow(tree_seed):
        in_bag = np.random.RandomState(tree_seed).randint(0, n, n).astype(np.int32)
        tree = DecisionTreeClassifier(min_samples_leaf=MIN_SAMPLES_LEAF, max_features="sqrt", random_state=tree_seed)
        tree.fit(x, target, sample_weight=_balanced_subsample_weights(classes, in_bag), check_input=False)
        return tree.tree_, np.bincount(in_bag, minlength=n) == 0

    threads = min(cpu_threads(), n_trees)
    if threads > 1:  # the trees grow without the GIL
        with ThreadPoolExecutor(max_workers=threads) as pool:
            grown = list(pool.map(grow, tree_seeds))
    else:
        grown = [grow(s) for s in tree_seeds]
    parts, offset, roots = [], 0, []
    for tree, _ in grown:
        counts = tree.value[:, 0, :]
        value = counts[:, 1] / np.maximum(counts.sum(axis=1), 1e-300)
        leaf = tree.children_left < 0
        left = np.where(leaf, -1, tree.children_left + offset)
        right = np.where(leaf, -1, tree.children_right + offset)
        parts.append((np.where(leaf, -1, tree.feature), tree.threshold, left, right, value))
        roots.append(offset)
        offset += tree.node_count
    feature, threshold, left, right, value = (np.concatenate(p) for p in zip(*parts))
    forest = Forest(feature.astype(np.int32), threshold.astype(np.float64), left.astype(np.int32),
                    right.astype(np.int32), value.astype(np.float64), np.asarray(roots, dtype=np.int32))
    out_of_bag = np.stack([unseen for _, unseen in grown]) if grown else np.zeros((0, n), bool)
    return forest, forest.out_of_bag(x, out_of_bag, backend=backend)
