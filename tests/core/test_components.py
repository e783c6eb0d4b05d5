"""Connected components on the CPU: equality with SciPy, canonical numbering, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components as csgraph_components
from scipy.spatial.distance import cdist

from ivote.components import cluster_points, connected_components, label
from ivote.components._reference import canonical_labels


@pytest.fixture(autouse=True)
def _numpy_backend(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")


def random_mask(shape, seed, density=0.45):
    rng = np.random.default_rng(seed)
    return ndi.uniform_filter(rng.random(shape), 2) < density


# ---------------------------------------------------------------- masks


@pytest.mark.parametrize("shape", [(97, 131), (23, 41, 37)])
@pytest.mark.parametrize("connectivity_kind", ["faces", "full"])
def test_label_equals_scipy(shape, connectivity_kind):
    mask = random_mask(shape, seed=len(shape))
    connectivity = 1 if connectivity_kind == "faces" else len(shape)
    labels, count = label(mask, connectivity=connectivity)
    expected, expected_count = ndi.label(mask, ndi.generate_binary_structure(len(shape), connectivity))
    assert count == expected_count > 10
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, expected)


def test_label_intermediate_connectivity_3d_and_integer_mask():
    mask = random_mask((20, 30, 30), seed=5)
    integer_mask = mask.astype(np.uint16) * 7
    result = label(integer_mask, connectivity=2)
    expected, expected_count = ndi.label(mask, ndi.generate_binary_structure(3, 2))
    assert result.count == expected_count
    np.testing.assert_array_equal(result.labels, expected)
    np.testing.assert_array_equal(result.sizes, np.bincount(expected.ravel())[1:])


def test_label_default_is_scipy_default():
    mask = random_mask((64, 64), seed=9)
    np.testing.assert_array_equal(label(mask).labels, ndi.label(mask)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_label_rejects_float_and_complex(dtype):
    with pytest.raises(TypeError, match="mask"):
        label(np.ones((4, 4), dtype=dtype))


@pytest.mark.parametrize("connectivity", [0, 3, 1.5, True])
def test_label_rejects_bad_connectivity(connectivity):
    with pytest.raises(ValueError, match="connectivity"):
        label(np.ones((4, 4), dtype=bool), connectivity=connectivity)


def test_label_rejects_empty_and_4d():
    with pytest.raises(ValueError, match="mask"):
        label(np.zeros((0, 4), dtype=bool))
    with pytest.raises(ValueError, match="mask"):
        label(np.zeros((2, 2, 2, 2), dtype=bool))


# ---------------------------------------------------------------- graphs


def scipy_components(edges, vertex_ids):
    """Oracle: SciPy on ids compacted by searchsorted; canonical numbering by smallest id."""
    index = np.searchsorted(vertex_ids, edges)
    n = len(vertex_ids)
    graph = sp.coo_matrix((np.ones(len(index)), (index[:, 0], index[:, 1])), shape=(n, n))
    n_components, labels = csgraph_components(graph, directed=False)
    return n_components, canonical_labels(labels.astype(np.int32), n_components)


def random_graph(rng, n_vertices, n_edges, id_low=0, id_high=2**64, dtype=np.uint64):
    ids = np.unique(rng.integers(id_low, id_high, size=n_vertices, dtype=dtype, endpoint=False))
    pick = rng.integers(0, len(ids), size=(n_edges, 2))
    edges = ids[pick]
    edges[: n_edges // 50, 1] = edges[: n_edges // 50, 0]  # self-loops
    edges = np.concatenate([edges, edges[: n_edges // 20, ::-1]])  # duplicates, reversed
    return ids, edges


def check_components_invariants(result):
    n = result.n_components
    assert result.component.dtype == np.int32
    assert np.all(np.diff(result.vertex_ids.astype(np.uint64)) > 0)  # sorted, distinct
    first = np.unique(result.component, return_index=True)[1]
    assert np.all(np.diff(first) > 0), "components are not numbered by smallest vertex"
    np.testing.assert_array_equal(result.sizes, np.bincount(result.component, minlength=n))
    assert result.sizes.sum() == len(result.vertex_ids)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_graph_ids_near_2_64_equal_scipy(seed):
    rng = np.random.default_rng(seed)
    ids, edges = random_graph(rng, 30_000, 16_000, id_low=2**64 - 10**6)
    isolated = ids[::7]
    result = connected_components(edges, vertices=isolated)
    vertex_ids = np.unique(np.concatenate([edges.ravel(), isolated]))
    n_components, expected = scipy_components(edges, vertex_ids)
    assert result.vertex_ids.dtype == np.uint64
    np.testing.assert_array_equal(result.vertex_ids, vertex_ids)
    assert result.n_components == n_components > 1000
    np.testing.assert_array_equal(result.component, expected)
    check_components_invariants(result)


def test_large_random_graph_many_components():
    rng = np.random.default_rng(3)
    ids, edges = random_graph(rng, 400_000, 1_000_000, id_low=2**63)
    result = connected_components(edges)
    n_components, expected = scipy_components(edges, result.vertex_ids)
    assert result.n_components == n_components
    np.testing.assert_array_equal(result.component, expected)


def test_signed_ids_and_n_vertices():
    edges = np.array([[0, 1], [1, 2], [5, 5], [7, 6], [2, 0]], dtype=np.int64)
    result = connected_components(edges, n_vertices=9)
    assert result.vertex_ids.dtype == np.int64
    np.testing.assert_array_equal(result.vertex_ids, np.arange(9))
    np.testing.assert_array_equal(result.component, [0, 0, 0, 1, 2, 3, 4, 4, 5])
    np.testing.assert_array_equal(result.sizes, [3, 1, 1, 1, 2, 1])
    np.testing.assert_array_equal(result.component_size, [3, 3, 3, 1, 1, 1, 2, 2, 1])


# The three test graphs of the CUDA BFS report were given only as "two
# components; one; one". These are small explicit graphs of that shape: two
# triangles; a path; a star with a cycle and duplicated, reversed edges.
BFS_REPORT_GRAPHS = [
    (np.array([[10, 11], [11, 12], [12, 10], [20, 21], [21, 22], [22, 20]]), 2),
    (np.array([[1, 2], [2, 3], [3, 4], [4, 5]]), 1),
    (np.array([[0, 1], [0, 2], [0, 3], [3, 1], [1, 0], [2, 0], [3, 3]]), 1),
]


@pytest.mark.parametrize("edges, n_components", BFS_REPORT_GRAPHS)
def test_bfs_report_graphs(edges, n_components):
    result = connected_components(edges)
    assert result.n_components == n_components
    assert result.sizes.sum() == len(np.unique(edges))
    check_components_invariants(result)


def test_graph_bad_input():
    with pytest.raises(TypeError, match="edges"):
        connected_components(np.array([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="negative"):
        connected_components(np.array([[0, -3]]))
    with pytest.raises(ValueError, match=r"\(E, 2\)"):
        connected_components(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="n_vertices"):
        connected_components(np.array([[0, 5]]), n_vertices=5)
    with pytest.raises(ValueError, match="empty"):
        connected_components(np.zeros((0, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match="not both"):
        connected_components(np.array([[0, 1]]), n_vertices=3, vertices=[2])


def test_only_isolated_vertices():
    result = connected_components(np.zeros((0, 2), dtype=np.uint64), vertices=np.array([9, 3, 3], np.uint64))
    assert result.n_components == 2
    np.testing.assert_array_equal(result.vertex_ids, [3, 9])


# ---------------------------------------------------------------- points


@pytest.mark.parametrize("ndim, distance", [(2, 2.5), (3, 6.0)])
def test_cluster_points_equal_brute_force(ndim, distance):
    rng = np.random.default_rng(ndim)
    points = rng.random((600, ndim)) * 100
    spacing = (2.0, 0.5, 0.5)[-ndim:]
    result = cluster_points(points, distance=distance, spacing=spacing)
    close = cdist(points * spacing, points * spacing) <= distance
    n_clusters, expected = csgraph_components(sp.csr_matrix(close), directed=False)
    assert result.n_clusters == n_clusters
    assert 10 < n_clusters < 590
    np.testing.assert_array_equal(result.cluster, canonical_labels(expected.astype(np.int32), n_clusters))
    np.testing.assert_array_equal(result.cluster_size, result.sizes[result.cluster])


def test_cluster_true_centres_of_synthetic_nuclei():
    from ivote.data import sample_2d

    sample = sample_2d()
    result = cluster_points(sample.centers, distance=2 * sample.radius, spacing=sample.spacing)
    assert result.sizes.sum() == len(sample.centers)
    assert result.n_clusters < len(sample.centers)  # overlapping nuclei were generated


def test_cluster_points_bad_input():
    with pytest.raises(ValueError, match="distance"):
        cluster_points(np.zeros((3, 2)), distance=0)
    with pytest.raises(ValueError, match="points"):
        cluster_points(np.zeros((3, 4)), distance=1)
    with pytest.raises(ValueError, match="spacing"):
        cluster_points(np.zeros((3, 2)), distance=1, spacing=(1, 1, 1))
    with pytest.raises(ValueError, match="NaN"):
        cluster_points(np.array([[0.0, np.nan]]), distance=1)
