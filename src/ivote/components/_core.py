"""Public API of connected components: input checks, backend choice, results.

Backend rule for this stage: the work runs on the GPU when the input is a CuPy
array or when :func:`ivote._backend.default_xp` is CuPy (a GPU is present and
``IVOTE_BACKEND`` does not say ``numpy``); results come back as arrays of the
input's own module (NumPy in, NumPy out), so CPU and GPU give identical arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Any, NamedTuple

import numpy as np

from .._backend import default_xp, get_array_module, to_device, to_host, to_host_pinned
from .._typing import Array, ArrayLike, Spacing
from .._validate import check_image, check_positive, check_spacing
from . import _reference

__all__ = [
    "GraphComponents",
    "Labelling",
    "PointClusters",
    "cluster_points",
    "connected_components",
    "label",
]


class Labelling(NamedTuple):
    """Instance labels of a mask; unpacks like ``scipy.ndimage.label``: ``labels, count``.

    Attributes
    ----------
    labels : ndarray of int32 (int64 from 2**31 - 2 elements)
        0 for background, 1..count for the components, numbered in raster order of
        their first pixel (exactly as ``scipy.ndimage.label``).
    count : int
        Number of components.
    """

    labels: Any
    count: int

    @property
    def sizes(self):
        """Pixels (voxels) per component, ``sizes[k]`` for label ``k + 1``."""
        xp = get_array_module(self.labels)
        return xp.bincount(self.labels.ravel(), minlength=self.count + 1)[1:]


@dataclass(frozen=True)
class GraphComponents:
    """Connected components of an undirected graph.

    Attributes
    ----------
    n_components : int
    vertex_ids : ndarray of uint64 (int64 for signed input)
        The vertices, sorted ascending and distinct.
    component : ndarray of int32
        Component of each vertex (same order as ``vertex_ids``), numbered
        0..n_components-1 in order of each component's smallest vertex id.
    sizes : ndarray of int64
        Vertices per component.
    """

    n_components: int
    vertex_ids: Any
    component: Any
    sizes: Any

    @property
    def component_size(self):
        """Size of the component of each vertex."""
        return self.sizes[self.component]


@dataclass(frozen=True)
class PointClusters:
    """Clusters of points: components of the graph joining close points.

    Attributes
    ----------
    n_clusters : int
    cluster : ndarray of int32
        Cluster of each point, numbered 0..n_clusters-1 in order of each
        cluster's first point.
    sizes : ndarray of int64
        Points per cluster.
    """

    n_clusters: int
    cluster: Any
    sizes: Any

    @property
    def cluster_size(self):
        """Size of the cluster of each point (1 for an isolated point)."""
        return self.sizes[self.cluster]


def _compute_module(*arrays):
    """CuPy if any input lives on the GPU or the default backend is CuPy, else NumPy."""
    xp = get_array_module(*arrays)
    return xp if xp is not np else default_xp()


def _check_connectivity(connectivity, ndim: int) -> int:
    if connectivity is None:
        return 1
    if isinstance(connectivity, bool) or not isinstance(connectivity, Integral) or not 1 <= connectivity <= ndim:
        raise ValueError(
            f"connectivity must be an integer with 1 <= connectivity <= {ndim} "
            f"(1: faces only; {ndim}: faces, edges and corners); got {connectivity!r}"
        )
    return int(connectivity)


def label(mask: ArrayLike | Array, *, connectivity: int | None = None) -> Labelling:
    """Label the connected components of a binary mask.

    Parameters
    ----------
    mask : ndarray of bool or integers, 1D to 3D (NumPy or CuPy)
        Foreground where nonzero. Float and complex masks are rejected: threshold
        them first (``image > t``).
    connectivity : int, optional
        Neighbours that touch: 1 (default, as ``scipy.ndimage.label``) joins pixels
        sharing a face; ``mask.ndim`` (as ``skimage.measure.label``'s default)
        also joins edges and corners.

    Returns
    -------
    Labelling
        ``(labels, count)``, equal to ``scipy.ndimage.label(mask,
        generate_binary_structure(mask.ndim, connectivity))``; ``.sizes`` gives the
        pixels per label.

    Notes
    -----
    On the GPU this is ``cupyx.scipy.ndimage.label`` (CuPy >= 13 handles masks of
    2**31 elements and more with 64-bit labels; with an older CuPy such masks
    are labelled by SciPy on the host).

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.components import label
    >>> mask = np.array([[1, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 1]], dtype=bool)
    >>> labels, count = label(mask)
    >>> count
    4
    >>> labels
    array([[1, 1, 0, 0],
           [0, 0, 2, 0],
           [3, 0, 0, 4]], dtype=int32)
    >>> label(mask, connectivity=2).count
    2
    """
    xp_in = get_array_module(mask)
    mask = xp_in.asarray(mask)
    if mask.dtype.kind not in "biu":
        raise TypeError(
            f"mask must have a bool or integer dtype (nonzero is foreground); got {mask.dtype}: "
            "threshold float images first, e.g. mask = image > threshold"
        )
    mask = check_image(mask, name="mask", ndims=(1, 2, 3))
    connectivity = _check_connectivity(connectivity, mask.ndim)
    xp = _compute_module(mask)
    if xp is not np:
        from . import _cuda

        if _cuda.cupy_label_supports(xp, mask.size):
            labels, count = _cuda.label_gpu(xp, to_device(mask, xp), connectivity)
            return Labelling(labels if xp_in is xp else to_host(labels), count)
    labels, count = _reference.label_ref(to_host(mask), connectivity)
    return Labelling(labels if xp_in is np else to_device(labels, xp_in), count)


def _uint64_ids(values, name: str, module):
    """Integer ids as a C-contiguous uint64 array of ``module`` (no copy when they are 64-bit
    already) and whether they were signed; negatives are checked by :func:`_check_not_negative`."""
    if values.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer vertex ids (int or uint, up to 64 bits); got dtype {values.dtype}")
    signed = values.dtype.kind == "i"
    if signed:
        values = values.astype(np.int64, copy=False).view(np.uint64)
    else:
        values = values.astype(np.uint64, copy=False)
    return module.ascontiguousarray(values), signed


def _check_not_negative(ids, signed: bool, name: str) -> None:
    if signed and ids.size and bool((ids.view(np.int64) < 0).any()):
        raise ValueError(f"{name} must hold non-negative vertex ids; found a negative id")


def _check_below(edge_ids, n_vertices: int) -> None:
    if edge_ids.size and int(edge_ids.max()) >= n_vertices:
        raise ValueError(
            f"edges hold the id {int(edge_ids.max())}, but n_vertices={n_vertices} allows only 0..{n_vertices - 1}"
        )


def _as_ids(values, name: str, xp):
    """Integer ids as a uint64 array on ``xp`` (signedness returned), negatives rejected."""
    values = xp.asarray(values) if get_array_module(values) is xp else to_device(np.asarray(values), xp)
    ids, signed = _uint64_ids(values, name, xp)
    _check_not_negative(ids, signed, name)
    return ids, signed


def connected_components(edges: ArrayLike | Array, *, n_vertices: int | None = None,
                         vertices: ArrayLike | Array | None = None) -> GraphComponents:
    """Connected components of an undirected graph given by an edge list.

    Parameters
    ----------
    edges : (E, 2) array of integers (NumPy or CuPy)
        One edge per row, as arbitrary non-negative ids up to 2**64 - 1 (uint64)
        or 2**63 - 1 (int64), such as pre- and post-synaptic neuron ids.
        Self-loops and duplicate edges are allowed.
    n_vertices : int, optional
        The vertices are 0..n_vertices-1 (isolated ones included); every id in
        ``edges`` must be smaller.
    vertices : 1D array of integers, optional
        Further vertex ids (isolated vertices); the vertex set is the union of
        these and the ids in ``edges``. Not together with ``n_vertices``.

    Returns
    -------
    GraphComponents
        ``n_components``, the sorted distinct ``vertex_ids``, the ``component`` of
        each vertex (numbered in order of smallest vertex id, so CPU and GPU agree
        exactly) and the component ``sizes``.

    Notes
    -----
    CPU: ids compacted by ``numpy.unique``, then
    ``scipy.sparse.csgraph.connected_components``. GPU: ids compacted on the
    device by a hash table (only the distinct ids are sorted; host edges are
    copied through pinned memory in chunks, each hashed as it arrives while the
    next ones are copied), then a union-find in the style of ECL-CC [1]_ over
    the edge list (start at the smallest neighbour, hook roots with atomicCAS,
    compress paths by pointer jumping). Host inputs give NumPy results in pinned
    (page-locked) memory.

    References
    ----------
    .. [1] J. Jaiganesh and M. Burtscher, "A high-performance connected
       components implementation for GPUs", HPDC 2018.
       :doi:`10.1145/3208040.3208041`

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.components import connected_components
    >>> edges = np.array([[2**64 - 1, 7], [7, 7], [40, 41]], dtype=np.uint64)
    >>> cc = connected_components(edges, vertices=np.array([5]))
    >>> cc.n_components
    3
    >>> cc.vertex_ids.tolist()
    [5, 7, 40, 41, 18446744073709551615]
    >>> cc.component.tolist(), cc.sizes.tolist()
    ([0, 1, 2, 2, 1], [1, 2, 2])
    """
    if n_vertices is not None and vertices is not None:
        raise ValueError("give either n_vertices or vertices, not both")
    xp_in = get_array_module(edges, vertices)
    xp = _compute_module(edges, vertices)
    # host edges for the GPU travel through pinned memory, their ids hashed as they arrive
    staged = xp is not np and get_array_module(edges) is np
    if staged:
        edge_ids, signed = _uint64_ids(np.asarray(edges), "edges", np)
    else:
        edge_ids, signed = _as_ids(edges, "edges", xp)
    edges_signed = signed
    if edge_ids.ndim != 2 or edge_ids.shape[1] != 2:
        raise ValueError(f"edges must be an (E, 2) array, one edge per row; got shape {edge_ids.shape}")
    if vertices is not None:
        vertex_list, vertices_signed = _as_ids(vertices, "vertices", xp)
        vertex_list = vertex_list.ravel()
        signed = signed and vertices_signed
    else:
        vertex_list = None
    if n_vertices is not None:
        if isinstance(n_vertices, bool) or not isinstance(n_vertices, Integral) or n_vertices < 0:
            raise ValueError(f"n_vertices must be a non-negative integer; got {n_vertices!r}")
        n_vertices = int(n_vertices)
        if not staged:
            _check_below(edge_ids, n_vertices)
    elif edge_ids.size == 0 and (vertex_list is None or vertex_list.size == 0):
        raise ValueError("the graph is empty: edges has no rows and no vertices were given")

    if xp is np:
        result = _reference.connected_components_ref(edge_ids, n_vertices=n_vertices, vertices=vertex_list)
    elif staged:
        from . import _cuda

        def check(on_device):
            _check_not_negative(on_device, edges_signed, "edges")
            if n_vertices is not None:
                _check_below(on_device, n_vertices)

        result = _cuda.connected_components_from_host(xp, edge_ids, n_vertices=n_vertices, vertices=vertex_list,
                                                      check=check)
    else:
        from . import _cuda

        result = _cuda.connected_components_gpu(xp, edge_ids, n_vertices=n_vertices, vertices=vertex_list)
    vertex_ids, n_components, component, sizes = result
    if signed:
        vertex_ids = vertex_ids.view(np.int64)
    if xp_in is np and xp is not np:
        vertex_ids, component, sizes = to_host_pinned([vertex_ids, component, sizes], xp)
    elif xp_in is np:
        vertex_ids, component, sizes = to_host(vertex_ids), to_host(component), to_host(sizes)
    return GraphComponents(int(n_components), vertex_ids, component, sizes)


_LARGEST_COORDINATE = 1e150


def cluster_points(points: ArrayLike | Array, *, distance: float, spacing: Spacing = None) -> PointClusters:
    """Clusters of points: join every two points at most ``distance`` apart.

    Parameters
    ----------
    points : (N, D) array of floats, D in 1..3 (NumPy or CuPy)
        Point coordinates in pixels (napari order: z, y, x).
    distance : float
        Largest distance that joins two points, in physical units (µm when
        ``spacing`` is in µm per pixel).
    spacing : float or sequence of D floats, optional
        Size of a pixel along each axis; None means 1.

    Returns
    -------
    PointClusters
        ``cluster`` of each point (numbered in order of the cluster's first point),
        cluster ``sizes`` and ``n_clusters``; ``.cluster_size`` per point.

    Notes
    -----
    CPU: ``scipy.spatial.cKDTree.query_pairs``, then
    ``scipy.sparse.csgraph.connected_components``. GPU: the points are sorted
    into grid cells at least ``distance`` wide and one thread per point unites
    it, in a union-find forest, with the close points of its 3**D neighbouring
    cells. Both decide "at most ``distance``" by the same floating-point sum of
    squared differences, so they agree exactly.

    Examples
    --------
    >>> import numpy as np
    >>> from ivote.components import cluster_points
    >>> centres = np.array([[0, 0], [0, 8], [20, 20], [0, 15]], dtype=float)
    >>> clusters = cluster_points(centres, distance=4.0, spacing=0.5)
    >>> clusters.cluster.tolist(), clusters.sizes.tolist()
    ([0, 0, 1, 0], [3, 1])
    """
    xp_in = get_array_module(points)
    points = xp_in.asarray(points)
    if points.ndim != 2 or not 1 <= points.shape[1] <= 3:
        raise ValueError(f"points must be an (N, D) array with D in 1..3; got shape {points.shape}")
    if points.dtype.kind not in "biuf":
        raise TypeError(f"points must hold real coordinates; got dtype {points.dtype}")
    if points.size and not bool(xp_in.isfinite(points).all()):
        raise ValueError("points contain NaN or infinite coordinates")
    distance = check_positive(distance, "distance")
    spacing = check_spacing(spacing, points.shape[1])
    xp = _compute_module(points)
    coords = to_device(points, xp).astype(np.float64) * xp.asarray(spacing, dtype=np.float64)
    largest = float(xp.abs(coords).max()) if coords.size else 0.0
    if not largest < _LARGEST_COORDINATE:  # squared distances would overflow float64 (SciPy: "p too large")
        raise ValueError(f"points times spacing reach {largest:.3g}; physical coordinates must be below "
                         f"{_LARGEST_COORDINATE:.0e} in magnitude (their squared distances overflow beyond): "
                         "check the points' units and the spacing")
    result = None
    if xp is not np:
        from . import _cuda

        result = _cuda.cluster_points_gpu(xp, xp.ascontiguousarray(coords), distance)
    if result is None:
        result = _reference.cluster_points_ref(to_host(coords), distance)
    n_clusters, cluster, sizes = result
    if xp_in is np:
        cluster, sizes = to_host(cluster), to_host(sizes)
    else:
        cluster, sizes = to_device(cluster, xp_in), to_device(sizes, xp_in)
    return PointClusters(int(n_clusters), cluster, sizes)
