"""Connected components on the GPU: exactly equal to SciPy and to the CPU path."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi

import ivote._backend
from ivote._backend import default_xp, to_host
from ivote.components import cluster_points, connected_components, label
from ivote.components import _reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not ivote._backend.cupy_available(), reason="needs CuPy and a CUDA GPU"),
]


@pytest.fixture
def xp(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "cupy")
    return default_xp()


def random_mask(shape, seed, density=0.45):
    rng = np.random.default_rng(seed)
    return ndi.uniform_filter(rng.random(shape), 2) < density


@pytest.mark.parametrize("shape", [(301, 257), (41, 67, 59)])
@pytest.mark.parametrize("full", [False, True])
def test_label_gpu_equals_scipy(xp, shape, full):
    mask = random_mask(shape, seed=len(shape) + full)
    connectivity = len(shape) if full else 1
    expected, expected_count = ndi.label(mask, ndi.generate_binary_structure(len(shape), connectivity))
    on_device = label(xp.asarray(mask), connectivity=connectivity)
    assert type(on_device.labels).__module__.startswith("cupy")
    assert on_device.count == expected_count > 10
    np.testing.assert_array_equal(to_host(on_device.labels), expected)
    from_host = label(mask.astype(np.uint8), connectivity=connectivity)  # NumPy in, NumPy out, GPU inside
    assert isinstance(from_host.labels, np.ndarray) and from_host.labels.dtype == np.int32
    np.testing.assert_array_equal(from_host.labels, expected)
    np.testing.assert_array_equal(to_host(on_device.sizes), np.bincount(expected.ravel())[1:])


def test_label_gpu_rejects_float(xp):
    with pytest.raises(TypeError, match="mask"):
        label(xp.zeros((4, 4), dtype=xp.float32))


def random_graph(rng, n_vertices, n_edges, id_low=0):
    ids = np.unique(rng.integers(id_low, 2**64, size=n_vertices, dtype=np.uint64, endpoint=False))
    edges = ids[rng.integers(0, len(ids), size=(n_edges, 2))]
    edges[: n_edges // 50, 1] = edges[: n_edges // 50, 0]  # self-loops
    edges = np.concatenate([edges, edges[: n_edges // 20, ::-1]])  # duplicates
    return ids, edges


def assert_same_components(result, expected):
    vertex_ids, n_components, component, sizes = expected
    assert result.n_components == n_components
    np.testing.assert_array_equal(to_host(result.vertex_ids), vertex_ids)
    np.testing.assert_array_equal(to_host(result.component), component)
    np.testing.assert_array_equal(to_host(result.sizes), sizes)


@pytest.mark.parametrize("n_vertices, n_edges", [(50_000, 20_000), (2_000_000, 3_000_000), (4_000_000, 1_500_000)])
def test_random_graphs_ids_near_2_64(xp, n_vertices, n_edges):
    rng = np.random.default_rng(n_edges)
    ids, edges = random_graph(rng, n_vertices, n_edges, id_low=2**64 - 4 * n_vertices)
    isolated = ids[::11]
    expected = _reference.connected_components_ref(edges, vertices=isolated)
    assert expected[1] > 1
    assert_same_components(connected_components(xp.asarray(edges), vertices=xp.asarray(isolated)), expected)
    from_host = connected_components(edges, vertices=isolated)
    assert isinstance(from_host.component, np.ndarray)
    assert_same_components(from_host, expected)


@pytest.mark.parametrize("compaction", ["hash", "sort"])
def test_host_edges_in_chunks_both_compactions(xp, monkeypatch, compaction):
    # many small chunks around the ring of pinned buffers; the id 2**64 - 1 (the table's empty mark)
    from ivote import _backend
    from ivote.components import _cuda

    monkeypatch.setattr(_backend, "STAGE_CHUNK_BYTES", 8192)
    monkeypatch.setattr(_backend, "STAGE_SLOTS", 3)
    monkeypatch.setattr(_cuda, "COMPACTION", compaction)
    rng = np.random.default_rng(11)
    ids, edges = random_graph(rng, 30_000, 40_000, id_low=2**64 - 100_000)
    edges[::97, 0] = np.uint64(2**64 - 1)
    isolated = np.concatenate([ids[::13], [2**64 - 2]]).astype(np.uint64)
    expected = _reference.connected_components_ref(edges, vertices=isolated)
    result = connected_components(edges, vertices=isolated)
    assert isinstance(result.component, np.ndarray) and isinstance(result.vertex_ids, np.ndarray)
    assert result.vertex_ids[-1] == np.uint64(2**64 - 1)
    assert_same_components(result, expected)
    assert_same_components(connected_components(xp.asarray(edges), vertices=xp.asarray(isolated)), expected)
    small = rng.integers(0, 3000, size=(50_000, 2)).astype(np.int64)
    expected = _reference.connected_components_ref(small.astype(np.uint64), n_vertices=4000)
    assert_same_components(connected_components(small, n_vertices=4000), expected)
    with pytest.raises(ValueError, match="n_vertices"):
        connected_components(small, n_vertices=2000)
    small[-1, 1] = -5
    with pytest.raises(ValueError, match="negative"):
        connected_components(small)


def test_hash_compaction_equals_sorting(xp):
    from ivote.components import _cuda

    rng = np.random.default_rng(5)
    for ids in (rng.integers(0, 50, size=(10_000, 2)), rng.integers(0, 2**64, size=(70_001, 2), dtype=np.uint64)):
        edges = xp.asarray(ids.astype(np.uint64))
        vertices = xp.asarray(rng.integers(0, 2**64, size=100, dtype=np.uint64))
        table = _cuda.HashCompaction(xp, edges.size + vertices.size)
        slots = xp.empty(edges.shape, dtype=table.slot_dtype)
        table.insert(edges.reshape(-1), slots.reshape(-1))
        table.insert(vertices, xp.empty(vertices.size, dtype=table.slot_dtype))
        vertex_ids, rank = table.finish()
        sorted_ids, sorted_index = _cuda.compact_ids_sorted(xp, edges, vertices)
        np.testing.assert_array_equal(to_host(vertex_ids), to_host(sorted_ids))
        np.testing.assert_array_equal(to_host(rank[slots]), to_host(sorted_index))


def test_union_find_is_deterministic_under_races(xp):
    # few vertices, many edges: heavy contention on the same roots
    rng = np.random.default_rng(7)
    edges = rng.integers(0, 5000, size=(1_000_000, 2)).astype(np.uint64)
    edges[rng.random(len(edges)) < 0.9] %= np.uint64(50)
    expected = _reference.connected_components_ref(edges, n_vertices=20_000)
    for _ in range(5):
        assert_same_components(connected_components(xp.asarray(edges), n_vertices=20_000), expected)


def test_signed_ids_and_n_vertices(xp):
    edges = np.array([[0, 1], [1, 2], [5, 5], [7, 6], [2, 0]], dtype=np.int64)
    result = connected_components(xp.asarray(edges), n_vertices=9)
    assert result.vertex_ids.dtype == np.int64
    np.testing.assert_array_equal(to_host(result.component), [0, 0, 0, 1, 2, 3, 4, 4, 5])
    with pytest.raises(ValueError, match="negative"):
        connected_components(xp.asarray([[0, -1]]))


# Small explicit graphs shaped like the three test graphs of the CUDA BFS report
# (two components; one; one): the report gave only their component counts.
BFS_REPORT_GRAPHS = [
    (np.array([[10, 11], [11, 12], [12, 10], [20, 21], [21, 22], [22, 20]]), 2),
    (np.array([[1, 2], [2, 3], [3, 4], [4, 5]]), 1),
    (np.array([[0, 1], [0, 2], [0, 3], [3, 1], [1, 0], [2, 0], [3, 3]]), 1),
]


@pytest.mark.parametrize("edges, n_components", BFS_REPORT_GRAPHS)
def test_bfs_report_graphs(xp, edges, n_components):
    result = connected_components(xp.asarray(edges))
    assert result.n_components == n_components
    assert_same_components(result, _reference.connected_components_ref(edges.astype(np.uint64)))


@pytest.mark.parametrize("ndim, distance", [(2, 2.5), (3, 6.0)])
def test_cluster_points_gpu_equals_kdtree(xp, ndim, distance):
    rng = np.random.default_rng(ndim)
    points = rng.random((20_000, ndim)) * np.array([400, 400, 400][:ndim]) * (2 if ndim == 2 else 1)
    spacing = (2.0, 0.5, 0.5)[-ndim:]
    expected = _reference.cluster_points_ref(points * spacing, distance)
    assert 100 < expected[0] < len(points) - 100
    result = cluster_points(xp.asarray(points), distance=distance, spacing=spacing)
    assert result.n_clusters == expected[0]
    np.testing.assert_array_equal(to_host(result.cluster), expected[1])
    np.testing.assert_array_equal(to_host(result.sizes), expected[2])


def test_cluster_points_exact_ties(xp):
    # a lattice at exactly the distance: every tie must join, on both paths
    grid = np.stack(np.meshgrid(np.arange(30.0), np.arange(20.0), indexing="ij"), axis=-1).reshape(-1, 2)
    points = np.concatenate([grid, grid + [100.0, 0.0]])
    result = cluster_points(xp.asarray(points), distance=1.0)
    assert result.n_clusters == 2
    np.testing.assert_array_equal(to_host(result.sizes), [600, 600])
    apart = cluster_points(xp.asarray(points), distance=0.999)
    assert apart.n_clusters == len(points)
