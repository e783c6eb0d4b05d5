"""The CUDA evolution against the NumPy reference: labels IoU >= 0.99 per object."""

import numpy as np
import pytest

import ivote._backend
from ivote._backend import to_host
from ivote.data import synthetic_nuclei
from ivote.metrics import match_labels
from ivote.segment import segment_nuclei

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not ivote._backend.cupy_available(), reason="needs CuPy and a GPU"),
]


def per_object_iou(a, b):
    ious = {}
    for k in np.union1d(np.unique(a), np.unique(b)):
        if k == 0:
            continue
        inter = np.sum((a == k) & (b == k))
        union = np.sum((a == k) | (b == k))
        ious[int(k)] = inter / union
    return ious


def assert_agree(labels_np, labels_gpu):
    ious = per_object_iou(labels_np, to_host(labels_gpu))
    worst = min(ious.values())
    assert worst >= 0.99, f"worst per-object IoU {worst:.4f}: {sorted(ious.items(), key=lambda kv: kv[1])[:5]}"
    return ious


def test_2d_gpu_matches_numpy():
    image, truth, centers, spacing, radius = synthetic_nuclei((256, 256), spacing=(0.5, 0.5), radius=6, seed=21)
    seeds = np.concatenate([centers, [[0.0, 0.0], [255.0, 128.0]]])  # boxes that leave the image
    kwargs = dict(radius=radius, spacing=spacing, iterations=150, tol=0)
    labels_np = segment_nuclei(image, seeds, backend="numpy", **kwargs)
    labels_gpu = segment_nuclei(image, seeds, backend="cupy", **kwargs)
    assert to_host(labels_gpu).dtype == np.int32
    assert_agree(labels_np, labels_gpu)
    assert match_labels(to_host(labels_gpu), truth).f1 >= 0.9


def test_3d_anisotropic_gpu_matches_numpy():
    image, truth, centers, spacing, radius = synthetic_nuclei((24, 96, 96), spacing=(2.0, 0.5, 0.5), radius=5, seed=8)
    kwargs = dict(radius=radius, spacing=spacing, iterations=100, tol=0)
    labels_np = segment_nuclei(image, centers, backend="numpy", **kwargs)
    labels_gpu = segment_nuclei(image, centers, backend="cupy", **kwargs)
    assert_agree(labels_np, labels_gpu)
    assert match_labels(to_host(labels_gpu), truth).f1 >= 0.8


def test_graph_and_direct_launches_agree():
    image, _, centers, spacing, radius = synthetic_nuclei((128, 128), radius=7, seed=2)
    kwargs = dict(radius=radius, iterations=75, reinit_every=25, tol=0, backend="cupy")
    with_graph = segment_nuclei(image, centers, use_graph=True, **kwargs)
    direct = segment_nuclei(image, centers, use_graph=False, **kwargs)
    assert_agree(to_host(direct), with_graph)


def test_gpu_default_parameters_and_device_input():
    image, truth, centers, spacing, radius = synthetic_nuclei((128, 128), radius=7, seed=9)
    labels = segment_nuclei(ivote._backend.to_device(image), centers, radius=radius)
    assert ivote._backend.is_device_array(labels)
    assert match_labels(to_host(labels), truth).f1 >= 0.9
    empty = segment_nuclei(image, np.zeros((0, 2)), radius=radius, backend="cupy")
    assert not to_host(empty).any()
