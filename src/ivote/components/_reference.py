"""NumPy/SciPy reference for connected components: the CPU path and the test oracle.

Every function takes validated NumPy arrays (see ``_core``) and returns NumPy
arrays with the canonical numbering: components ordered by their smallest
vertex (or point) index.
"""

from __future__ import annotations

import numpy as np
import scipy.ndimage as ndi
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components as _csgraph_components
from scipy.spatial import cKDTree

__all__ = [
    "canonical_labels",
    "cluster_points_ref",
    "components_of_index_edges",
    "connected_components_ref",
    "label_ref",
    "label_dtype",
    "squared_distances",
]


def label_dtype(size: int) -> np.dtype:
    """int32 labels below 2**31 - 2 elements, else int64 (as cupyx.scipy.ndimage.label)."""
    return np.dtype(np.int32 if size < 2**31 - 2 else np.int64)


def label_ref(mask: np.ndarray, connectivity: int) -> tuple[np.ndarray, int]:
    """``scipy.ndimage.label`` with the structure of ``connectivity``."""
    structure = ndi.generate_binary_structure(mask.ndim, connectivity)
    labels = np.empty(mask.shape, dtype=label_dtype(mask.size))
    count = ndi.label(mask, structure=structure, output=labels)
    return labels, int(count)


def canonical_labels(labels: np.ndarray, n_components: int) -> np.ndarray:
    """Renumber 0..n-1 labels so that components appear in order of their first element."""
    if labels.size == 0:
        return labels
    running_max = np.maximum.accumulate(labels)
    if labels[0] == 0 and not np.any(np.diff(running_max) > 1):
        return labels  # already canonical: each new label is the running maximum + 1
    _, first = np.unique(labels, return_index=True)
    rank = np.empty(n_components, dtype=labels.dtype)
    rank[np.argsort(first, kind="stable")] = np.arange(n_components, dtype=labels.dtype)
    return rank[labels]


def components_of_index_edges(index_edges: np.ndarray, n_vertices: int):
    """Components of a graph on vertices 0..n-1 given as an (E, 2) index array.

    Returns ``(n_components, component, sizes)`` with canonical numbering.
    """
    dtype = np.int32 if n_vertices < 2**31 else np.int64
    if n_vertices == 0:
        return 0, np.zeros(0, dtype), np.zeros(0, np.int64)
    rows = index_edges[:, 0].astype(np.intp, copy=False)
    cols = index_edges[:, 1].astype(np.intp, copy=False)
    # int32 weights: duplicate edges are summed and must not wrap to 0
    weights = np.ones(len(rows), dtype=np.int32)
    graph = sp.coo_matrix((weights, (rows, cols)), shape=(n_vertices, n_vertices)).tocsr()
    n_components, component = _csgraph_components(graph, directed=False)
    component = canonical_labels(component.astype(dtype, copy=False), n_components)
    sizes = np.bincount(component, minlength=n_components).astype(np.int64)
    return int(n_components), component, sizes


def connected_components_ref(edges: np.ndarray, *, n_vertices=None, vertices=None):
    """Components of an edge list of non-negative 64-bit ids (CPU).

    ``edges`` is (E, 2) uint64 (ids already checked); ``vertices`` optional extra
    vertex ids (uint64); ``n_vertices`` means the vertices are 0..n-1.
    Returns ``(vertex_ids (uint64), n_components, component, sizes)``.
    """
    if n_vertices is not None:
        vertex_ids = np.arange(n_vertices, dtype=np.uint64)
        index_edges = edges.astype(np.intp)
    else:
        ids = edges.ravel()
        if vertices is not None:
            ids = np.concatenate([ids, vertices])
        vertex_ids, inverse = np.unique(ids, return_inverse=True)
        index_edges = inverse[: edges.size].reshape(edges.shape)
    n_components, component, sizes = components_of_index_edges(index_edges, len(vertex_ids))
    return vertex_ids, n_components, component, sizes


def squared_distances(coords: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Squared distances of point pairs, summed axis by axis (as the GPU kernel does)."""
    d2 = np.zeros(len(pairs), dtype=np.float64)
    for axis in range(coords.shape[1]):
        diff = coords[pairs[:, 0], axis] - coords[pairs[:, 1], axis]
        d2 = d2 + diff * diff
    return d2


def cluster_points_ref(coords: np.ndarray, distance: float):
    """Components of the graph joining points (physical coordinates) at most ``distance`` apart.

    Returns ``(n_clusters, cluster, sizes)`` with canonical numbering.
    """
    n = len(coords)
    if n == 0:
        return components_of_index_edges(np.zeros((0, 2), np.intp), 0)
    tree = cKDTree(coords)
    # a slightly larger search radius, then the exact test shared with the GPU
    pairs = tree.query_pairs(distance * (1 + 1e-9), output_type="ndarray")
    pairs = pairs[squared_distances(coords, pairs) <= distance * distance]
    return components_of_index_edges(pairs, n)
