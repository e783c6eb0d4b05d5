"""GPU path for connected components: CuPy arrays in, CuPy arrays out.

Masks go to ``cupyx.scipy.ndimage.label`` (the same union-find idea as ours,
already written and tested). Graphs and point clusters use the union-find
kernels of ``kernels/components.cu``.

Graph ids are compacted by hashing (``ivote_cc_hash_insert``: each endpoint finds
its slot in an open-addressing table, then only the distinct ids are sorted),
which also lets ids arriving from the host be hashed chunk by chunk while the
next chunks are still being copied (:func:`connected_components_from_host`).
Where the table would not fit in the GPU's free memory, the ids are sorted
instead (:func:`compact_ids_sorted`); both give the same arrays.
"""

from __future__ import annotations

import numpy as np

from .._backend import get_kernel, gpu_memory_available, ndimage_module, to_device_staged, to_host
from ._reference import label_dtype

__all__ = [
    "cluster_points_gpu",
    "compact_ids",
    "compact_ids_sorted",
    "components_of_index_edges_gpu",
    "connected_components_from_host",
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
    # a bincount's atomics would queue on a giant component's one counter: added per warp instead
    name = f"ivote_cc_sizes<{'int' if component.dtype == np.int32 else 'long long'}>"
    sizes = xp.zeros(n_components, dtype=np.int64)
    get_kernel("components", name, name_expressions=(name,))(_grid(n), (_THREADS,), (component, np.int64(n), sizes))
    return n_components, component, sizes


def components_of_index_edges_gpu(xp, index_edges, n_vertices: int):
    """GPU twin of ``_reference.components_of_index_edges``."""
    roots = union_find(xp, index_edges, n_vertices)
    return canonical_from_roots(xp, roots)


def compact_ids_sorted(xp, edges, vertices=None):
    """Sorted distinct ids and the (E, 2) index of each endpoint among them, by sorting every id."""
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


COMPACTION = "auto"
"""How graph ids are compacted on the GPU: 'hash' (a table, where it fits in free memory: 'auto'),
or 'sort' (every endpoint sorted); the same arrays either way."""

_EMPTY_ID = np.uint64(2**64 - 1)


class HashCompaction:
    """Distinct 64-bit ids through an open-addressing table on the device (``ivote_cc_hash_insert``).

    :meth:`insert` queues one contiguous run of ids (a chunk as it arrives) and writes each id's
    slot; the thread that claims a slot appends the id and the slot to a list, so :meth:`finish`
    sorts the distinct ids without scanning the table and gives the rank of every slot: then
    ``rank[slots]`` is each id's index among the sorted distinct ids.
    """

    def __init__(self, xp, n_ids: int):
        self.xp = xp
        self.capacity = table_capacity(n_ids)
        self.slot_dtype = np.dtype(np.int32 if self.capacity + 1 < 2**31 else np.int64)
        self.table = xp.full(self.capacity, _EMPTY_ID, dtype=np.uint64)
        self.keys = xp.empty(max(n_ids, 1), dtype=np.uint64)  # the distinct ids, in order of their claim
        self.key_slots = xp.empty(max(n_ids, 1), dtype=self.slot_dtype)
        self.counters = xp.zeros(2, dtype=np.uint64)  # ids claimed; whether the id 2**64 - 1 occurs
        name = f"ivote_cc_hash_insert<{'int' if self.slot_dtype == np.int32 else 'long long'}>"
        self.kernel = get_kernel("components", name, name_expressions=(name,))

    def insert(self, ids, slots) -> None:
        """Queue the insertion of ``ids`` (1D contiguous uint64) writing their ``slots`` (1D, slot_dtype)."""
        n = int(ids.size)
        if n:
            self.kernel(_grid(n), (_THREADS,), (ids, np.int64(n), self.table, np.uint64(self.capacity - 1),
                                                slots, self.keys, self.key_slots, self.counters))

    def finish(self):
        """``(vertex_ids, rank)``: the sorted distinct ids and, per slot (and the extra slot of the
        id 2**64 - 1), the index of its id among them."""
        xp = self.xp
        claimed, has_max = (int(v) for v in to_host(self.counters))
        keys, key_slots = self.keys[:claimed], self.key_slots[:claimed]
        if has_max:  # that id never enters the table: the extra slot past its end
            keys = xp.concatenate([keys, xp.full(1, _EMPTY_ID, dtype=np.uint64)])
            key_slots = xp.concatenate([key_slots, xp.full(1, self.capacity, dtype=self.slot_dtype)])
        order = xp.argsort(keys)
        vertex_ids = keys[order]
        dtype = _idx_dtype(vertex_ids.size)
        rank = xp.empty(self.capacity + 1, dtype=dtype)
        rank[key_slots[order]] = xp.arange(vertex_ids.size, dtype=dtype)
        return vertex_ids, rank


def table_capacity(n_ids: int) -> int:
    """Slots of the id table: a power of two at least twice the ids (so at most half full)."""
    return 1 << max(10, int(2 * max(n_ids, 1) - 1).bit_length())


def use_hash(xp, n_ids: int) -> bool:
    """Whether to compact ``n_ids`` ids by hashing (:data:`COMPACTION`; 'auto': the table, its
    ranks and the slots take at most half the GPU memory still available)."""
    if COMPACTION not in ("auto", "hash", "sort"):
        raise ValueError(f"COMPACTION must be 'auto', 'hash' or 'sort'; got {COMPACTION!r}")
    if COMPACTION != "auto":
        return COMPACTION == "hash"
    capacity = table_capacity(n_ids)
    index_bytes = 4 if capacity + 1 < 2**31 else 8
    need = capacity * (8 + index_bytes) + n_ids * (8 + 3 * index_bytes)  # + claims, slots, indices
    return need <= 0.5 * gpu_memory_available()


def compact_ids(xp, edges, vertices=None):
    """Sorted distinct ids and the (E, 2) index of each endpoint among them (edges C-contiguous)."""
    n_ids = int(edges.size) + (0 if vertices is None else int(vertices.size))
    if not use_hash(xp, n_ids):
        return compact_ids_sorted(xp, edges, vertices)
    table = HashCompaction(xp, n_ids)
    slots = xp.empty(edges.shape, dtype=table.slot_dtype)
    table.insert(edges.reshape(-1), slots.reshape(-1))
    if vertices is not None:
        table.insert(vertices, xp.empty(vertices.size, dtype=table.slot_dtype))
    vertex_ids, rank = table.finish()
    return vertex_ids, rank[slots]


def connected_components_gpu(xp, edges, *, n_vertices=None, vertices=None):
    """GPU twin of ``_reference.connected_components_ref`` (uint64 ids on the device)."""
    if n_vertices is not None:
        vertex_ids = xp.arange(n_vertices, dtype=np.uint64)
        index_edges = edges.astype(_idx_dtype(n_vertices))
    else:
        vertex_ids, index_edges = compact_ids(xp, edges, vertices)
    n_components, component, sizes = components_of_index_edges_gpu(xp, index_edges, vertex_ids.size)
    return vertex_ids, n_components, component, sizes


def connected_components_from_host(xp, edges, *, n_vertices=None, vertices=None, check=None):
    """:func:`connected_components_gpu` of host uint64 ``edges`` (C-contiguous (E, 2)), hashing each
    chunk of ids on the device as it arrives through pinned memory (``to_device_staged``) while the
    next chunks are copied. ``vertices``: a device array or None; ``check(edges_on_device)`` runs
    (and may raise) once every id is on the device. Results are device arrays."""
    out = table = slots = None
    n_ids = int(edges.size) + (0 if vertices is None else int(vertices.size))
    hashed = n_vertices is None and use_hash(xp, n_ids)
    if not hashed:
        on_chunk = None
    else:
        table = HashCompaction(xp, n_ids)
        out = xp.empty(edges.shape, dtype=np.uint64)
        slots = xp.empty(edges.shape, dtype=table.slot_dtype)
        ids_flat, slots_flat = out.reshape(-1), slots.reshape(-1)

        def on_chunk(start, stop):
            table.insert(ids_flat[start:stop], slots_flat[start:stop])

    edges_device = to_device_staged(edges, xp, on_chunk=on_chunk, out=out)
    if check is not None:
        check(edges_device)
    if table is None:
        return connected_components_gpu(xp, edges_device, n_vertices=n_vertices, vertices=vertices)
    if vertices is not None:
        table.insert(vertices, xp.empty(vertices.size, dtype=table.slot_dtype))
    vertex_ids, rank = table.finish()
    n_components, component, sizes = components_of_index_edges_gpu(xp, rank[slots], vertex_ids.size)
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
