"""GPU path for connected components: CuPy arrays in, CuPy arrays out.

Masks go to ``cupyx.scipy.ndimage.label`` (the same union-find idea as ours,
already written and tested). Graphs and point clusters use the union-find
kernels of ``kernels/components.cu``.
"""

from __future__ import annotations

import numpy as np

from .._backend import get_kernel, ndimage_module, to_host
from ._reference import label_dtype

__all__ = [
    "cluster_points_gpu",
    "components_of_index_edges_gpu",
    "connected_components_gpu",
    "cupy_label_supports",
    "label_gpu",
]

_THREADS = 256


def _grid(n: int) -> tuple[int]:
    return (max(1, min((n + _THREADS - 1) // _THREADS, 65535 * 8)),)


def _idx_ctype(n: int) -> str:
    return "int" if n < 2**31 else "long long"


def _idx_dtype(n: int):
    return np.int32 if n < 2**31 else np.int64


def cupy_label_supports(xp, size: int) -> bool:
    """Whether ``cupyx.scipy.ndimage.label`` labels ``size`` elements.

    CuPy 13 and later switch to 64-bit labels at 2**31 - 2 elements; older
    versions index with 32 bits, so larger masks go to SciPy on the host.
    """
    major = int(xp.__version__.split(".")[0])
    return major >= 13 or size < 2**31 - 2


def label_gpu(xp, mask, connectivity: int):
    """``cupyx.scipy.ndimage.label`` with the structure of ``connectivity``."""
    import scipy.ndimage

    ndi = ndimage_module(xp)
    structure = scipy.ndimage.generate_binary_structure(mask.ndim, connectivity)  # small, host
    labels = xp.empty(mask.shape, dtype=label_dtype(mask.size))
    count = ndi.label(mask, structure=structure, output=labels)
    return labels, int(count)


def union_find(xp, index_edges, n_vertices: int):
    """Root (smallest vertex) of every vertex, from an (E, 2) index array on the device."""
    ctype = _idx_ctype(n_vertices)
    dtype = _idx_dtype(n_vertices)
    names = tuple(f"ivote_cc_{step}<{ctype}>" for step in ("init", "hook", "flatten"))
    init, hook, flatten = (get_kernel("components", name, name_expressions=names) for name in names)
    index_edges = xp.ascontiguousarray(index_edges, dtype=dtype)
    parent = xp.arange(n_vertices, dtype=dtype)
    n_edges = np.int64(index_edges.shape[0])
    if n_edges:
        init(_grid(int(n_edges)), (_THREADS,), (index_edges, n_edges, parent))
        hook(_grid(int(n_edges)), (_THREADS,), (index_edges, n_edges, parent))
        flatten(_grid(n_vertices), (_THREADS,), (parent, np.int64(n_vertices)))
    return parent


def canonical_from_roots(xp, roots):
    """``(n_components, component, sizes)`` numbered by smallest vertex, from roots."""
    n = roots.size
    if n == 0:
        return 0, xp.zeros(0, roots.dtype), xp.zeros(0, np.int64)
    is_root = roots == xp.arange(n, dtype=roots.dtype)
    number_of_root = xp.cumsum(is_root, dtype=roots.dtype) - 1
    component = number_of_root[roots]
    n_components = int(number_of_root[-1]) + 1
    sizes = xp.bincount(component, minlength=n_components).astype(np.int64, copy=False)
    return n_components, component, sizes


def components_of_index_edges_gpu(xp, index_edges, n_vertices: int):
    """GPU twin of ``_reference.components_of_index_edges``."""
    roots = union_find(xp, index_edges, n_vertices)
    return canonical_from_roots(xp, roots)


def compact_ids(xp, edges, vertices=None):
    """Sorted distinct ids and the (E, 2) index of each endpoint among them."""
    flat = edges.ravel()
    ids = flat if vertices is None else xp.concatenate([flat, vertices])
    ids = xp.sort(ids)
    head = xp.empty(ids.size, dtype=bool)
    if ids.size:
        head[0] = True
        xp.not_equal(ids[1:], ids[:-1], out=head[1:])
    vertex_ids = ids[head]
    index = xp.searchsorted(vertex_ids, flat).astype(_idx_dtype(vertex_ids.size), copy=False)
    return vertex_ids, index.reshape(edges.shape)


def connected_components_gpu(xp, edges, *, n_vertices=None, vertices=None):
    """GPU twin of ``_reference.connected_components_ref`` (uint64 ids on the device)."""
    if n_vertices is not None:
        vertex_ids = xp.arange(n_vertices, dtype=np.uint64)
        index_edges = edges.astype(_idx_dtype(n_vertices))
    else:
        vertex_ids, index_edges = compact_ids(xp, edges, vertices)
    n_components, component, sizes = components_of_index_edges_gpu(xp, index_edges, vertex_ids.size)
    return vertex_ids, n_components, component, sizes


def cluster_points_gpu(xp, coords, distance: float):
    """Union-find over a uniform grid of cells at least ``distance`` wide.

    Returns ``(n_clusters, cluster, sizes)``, or None when the grid would need
    more than 2**62 cells (points very far apart for the distance): the caller
    then uses the KD-tree on the host.
    """
    n, ndim = coords.shape
    if n == 0:
        return canonical_from_roots(xp, xp.zeros(0, np.int32))
    # a hair wider than distance, so rounding cannot put a close pair two cells apart
    cell_width = distance * (1 + 2.0**-20)
    cells = xp.floor((coords - coords.min(axis=0)) / cell_width).astype(np.int64)
    extent = cells.max(axis=0) + 1
    extent_host = [int(e) for e in to_host(extent)]
    if float(np.prod(np.array(extent_host, dtype=float))) >= 2.0**62:
        return None
    keys = cells[:, 0].copy()
    for axis in range(1, ndim):
        keys = keys * extent_host[axis] + cells[:, axis]
    order = xp.argsort(keys)
    keys = keys[order]
    head = xp.empty(n, dtype=bool)
    head[0] = True
    xp.not_equal(keys[1:], keys[:-1], out=head[1:])
    dtype = _idx_dtype(n)
    cell_start = xp.concatenate([xp.flatnonzero(head), xp.asarray([n])]).astype(dtype)
    cell_keys = keys[head]
    name = f"ivote_cc_cluster_grid<{_idx_ctype(n)}, {ndim}>"
    kernel = get_kernel("components", name, name_expressions=(name,))
    parent = xp.arange(n, dtype=dtype)
    kernel(
        _grid(n),
        (_THREADS,),
        (
            xp.ascontiguousarray(coords[order]),
            xp.ascontiguousarray(cells[order]),
            order.astype(dtype),
            cell_keys,
            cell_start,
            np.int64(cell_keys.size),
            extent.astype(np.int64),
            np.float64(distance * distance),
            np.int64(n),
            parent,
        ),
    )
    flatten_name = f"ivote_cc_flatten<{_idx_ctype(n)}>"
    flatten = get_kernel("components", flatten_name, name_expressions=(flatten_name,))
    flatten(_grid(n), (_THREADS,), (parent, np.int64(n)))
    return canonical_from_roots(xp, parent)
