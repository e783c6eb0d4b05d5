"""The CUDA evolution against the NumPy reference: labels IoU >= 0.99 per object."""

import numpy as np
import pytest

import ivote._backend
from ivote._backend import to_host
from ivote.data import synthetic_nuclei
from ivote.metrics import match_labels
from ivote.segment import segment_nuclei
from ivote.segment import _reference as ref

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


@pytest.mark.parametrize("ndim", [2, 3])
def test_device_reinitialise_prior_and_labels_match_numpy(ndim):
    """The between-block kernels (exact per-box EDT, prior evaluation, atomicMax labels)
    against the NumPy reference functions on the same level sets."""
    from ivote._backend import default_xp
    from ivote.segment import _segment
    from ivote.segment._cuda import CudaStepper
    from ivote.segment._shape_prior import fit_poses, moment_features, prior_sdf

    xp = default_xp()
    shape, spacing = ((160, 160), (1.0, 1.0)) if ndim == 2 else ((24, 64, 64), (2.0, 0.5, 0.5))
    image, _, centers, spacing, radius = synthetic_nuclei(shape, spacing=spacing, radius=6, seed=4)
    h = min(spacing)
    spacing_n = tuple(s / h for s in spacing)
    seeds = np.concatenate([centers, np.zeros((1, ndim))])  # a box that leaves the image
    batches, phis = {}, {}
    for name, module in (("np", np), ("gpu", xp)):
        normalised = _segment._normalise(module.asarray(image, dtype=module.float32), "bright", module)
        batch = _segment._build_batch(normalised, seeds, radius / h, spacing_n, dict(_segment.DEFAULT_WEIGHTS),
                                      1.5, module)
        batches[name] = batch
        phis[name] = _segment._initial_level_sets(seeds, batch, 0.5 * radius / h, module)
    rng = np.random.default_rng(0)
    noise = rng.normal(scale=0.7, size=phis["np"].shape).astype(np.float32)  # ragged fronts
    phis["np"] = phis["np"] + noise
    phis["gpu"] = xp.asarray(phis["np"])
    clip = max(3.0, 0.25 * radius / h)
    stepper = CudaStepper(batches["gpu"], block_length=10)
    expected = ref.reinitialise(phis["np"], batches["np"], clip, np)
    got = to_host(stepper.reinitialise(phis["gpu"], clip))
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-5)
    b = batches["np"]
    pose = fit_poses((expected > 0) & b.valid, moment_features(b.box_shape, b.spacing, np), b.spacing, b.prior, np)
    psi = to_host(stepper.prior(xp.asarray(pose)))
    np.testing.assert_allclose(psi, prior_sdf(pose, b.box_shape, b.spacing, b.prior, np), atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(to_host(stepper.labels(xp.asarray(expected))), ref.labels(expected, b, np))


@pytest.mark.parametrize("plane_kernel, slab_kernel", [(False, True), (True, False), (False, False)])
def test_device_reinitialise_3d_global_passes_match_numpy(plane_kernel, slab_kernel):
    """The 3D reinitialisation where a box plane (12 by bx bytes) or a (z, x) slab (8 bz bx)
    exceeds 48 KiB of shared memory (boxes over 64 wide: radius >= 21 px) takes the global
    passes (ivote_levelset_edt_x, _edt_pass<3, 1, false>, _edt_pass<3, 0, true>) instead of
    ivote_levelset_edt_xy / _edt_z_final: each combination against the NumPy reference."""
    from ivote._backend import default_xp
    from ivote.segment import _segment
    from ivote.segment._cuda import CudaStepper

    xp = default_xp()
    image, _, centers, spacing, radius = synthetic_nuclei((24, 64, 64), spacing=(2.0, 0.5, 0.5), radius=6, seed=4)
    h = min(spacing)
    spacing_n = tuple(s / h for s in spacing)
    seeds = np.concatenate([centers, np.zeros((1, 3))])  # a box that leaves the image
    normalised = _segment._normalise(xp.asarray(image, dtype=xp.float32), "bright", xp)
    batch = _segment._build_batch(normalised, seeds, radius / h, spacing_n, dict(_segment.DEFAULT_WEIGHTS), 1.5, xp)
    phi = to_host(_segment._initial_level_sets(seeds, batch, 0.5 * radius / h, xp))
    phi = phi + np.random.default_rng(0).normal(scale=0.7, size=phi.shape).astype(np.float32)
    host_batch = _segment._build_batch(_segment._normalise(np.asarray(image, dtype=np.float32), "bright", np), seeds,
                                       radius / h, spacing_n, dict(_segment.DEFAULT_WEIGHTS), 1.5, np)
    clip = max(3.0, 0.25 * radius / h)
    stepper = CudaStepper(batch, block_length=10)
    assert stepper._edt_xy is not None and stepper._edt_z is not None  # small boxes: both in shared memory
    stepper._edt_xy = stepper._edt_xy if plane_kernel else None
    stepper._edt_z = stepper._edt_z if slab_kernel else None
    expected = ref.reinitialise(phi, host_batch, clip, np)
    np.testing.assert_allclose(to_host(stepper.reinitialise(xp.asarray(phi), clip)), expected, atol=1e-4, rtol=1e-5)


def assert_step_variants_agree(image, seeds, spacing, radius, variants, kernel_part):
    """One block of 30 iterations by each CudaStepper variant from the same start: the variants
    whose key starts with ``kernel_part`` use that kernel, and all give the tiled kernel's level
    sets (float atomics add the canvas and the sums in another order: rounding only)."""
    from ivote._backend import default_xp
    from ivote.segment import _segment
    from ivote.segment._cuda import CudaStepper
    from ivote.segment._shape_prior import fit_poses, moment_features

    xp = default_xp()
    h = min(spacing)
    spacing_n = tuple(s / h for s in spacing)
    normalised = _segment._normalise(xp.asarray(image, dtype=xp.float32), "bright", xp)
    batch = _segment._build_batch(normalised, seeds, radius / h, spacing_n, dict(_segment.DEFAULT_WEIGHTS), 1.5, xp)
    phi = _segment._initial_level_sets(seeds, batch, 0.5 * radius / h, xp)
    pose = fit_poses((phi > 0) & batch.valid, moment_features(batch.box_shape, batch.spacing, xp), batch.spacing,
                     batch.prior, xp)
    results = {}
    for key, options in variants.items():
        stepper = CudaStepper(batch, block_length=30, use_graph=False, **options)
        assert (kernel_part in stepper.kernel_name) == key.startswith(kernel_part), stepper.kernel_name
        stepper.prior(pose)
        results[key] = to_host(stepper.run(phi, 30))
    moved = np.abs(results["tiled"] - to_host(phi)).max()
    assert moved > 0.1
    for key in variants:
        np.testing.assert_allclose(results[key], results["tiled"], atol=1e-4, rtol=1e-4)


def test_3d_marching_kernel_matches_tiled_kernel():
    """The z-marching 3D step (several chunkings of the box) against the tiled step, which the
    tests above hold to the NumPy reference."""
    image, _, centers, spacing, radius = synthetic_nuclei((24, 64, 64), spacing=(2.0, 0.5, 0.5), radius=6, seed=4)
    seeds = np.concatenate([centers, [[0.0, 0.0, 0.0], [23.0, 63.0, 30.0]]])  # boxes that leave the image
    variants = {  # the tiled kernel zeroing the next canvas itself, as before the marching kernel
        "tiled": dict(tiles=(4, 8, 8), march={"memset": False}),
        "march": dict(march={"planes": 4}),  # a memset zeroes the next canvas (boxes hold more cells than the image)
        "march, one chunk": dict(march={"planes": 1000, "unroll": 2, "threads": 128, "memset": False}),
    }
    assert_step_variants_agree(image, seeds, spacing, radius, variants, "march")


def test_3d_marching_kernel_on_wide_boxes():
    """Boxes 93 wide (radius 30 px): the ring of 4 planes takes 48 KiB less the static
    shared memory's reserve (49104 dynamic bytes plus 80 static failed to launch) and the
    rows of a plane come in 4 y-chunks, which the small boxes above never split."""
    from ivote.segment._cuda import march_plan

    image, _, centers, spacing, _ = synthetic_nuclei((40, 100, 100), radius=12, seed=4)
    seeds = np.concatenate([centers[:3], [[0.0, 0.0, 0.0]]])
    plan = march_plan((93, 93, 93), None)
    assert plan is not None and plan[3] > 1 and plan[4] + 80 <= 48 * 1024
    variants = {"tiled": dict(tiles=(4, 8, 8), march={"memset": False}), "march": dict()}
    assert_step_variants_agree(image, seeds, spacing, 30.0, variants, "march")


def test_2d_row_kernel_matches_tiled_kernel():
    """The 2D step over full-width rows (several chunkings of the box) against the tiled step,
    which the tests above hold to the NumPy reference."""
    image, _, centers, spacing, radius = synthetic_nuclei((160, 192), spacing=(1.0, 0.5), radius=6, seed=4)
    seeds = np.concatenate([centers, [[0.0, 0.0], [159.0, 100.0]]])  # boxes that leave the image
    variants = {
        "tiled": dict(tiles=(1, 8, 32)),
        "rows": dict(),
        "rows, 2 cells": dict(rows={"threads": 128, "cells": 2, "min_blocks": 8}),
        "rows, 1 row": dict(rows={"threads": 64, "cells": 1, "min_blocks": 8}),
    }
    assert_step_variants_agree(image, seeds, spacing, radius, variants, "rows")


@pytest.mark.parametrize("ndim", [2, 3])
def test_device_fit_matches_numpy(ndim):
    """The shape-prior fit on the device (moments kernel, Jacobi eigen-decomposition per object)
    against _shape_prior.fit_poses: the same centres, scales and mode weights; the rotations may
    differ in the signs of the axes, so the fitted priors are compared."""
    from ivote._backend import default_xp
    from ivote.segment import _segment
    from ivote.segment._cuda import CudaStepper
    from ivote.segment._shape_prior import fit_poses, moment_features, pose_size, prior_sdf

    xp = default_xp()
    shape, spacing = ((160, 160), (1.0, 1.0)) if ndim == 2 else ((24, 64, 64), (2.0, 0.5, 0.5))
    image, _, centers, spacing, radius = synthetic_nuclei(shape, spacing=spacing, radius=6, seed=4)
    seeds = np.concatenate([centers, np.zeros((1, ndim))])  # a box that leaves the image
    h = min(spacing)
    spacing_n = tuple(s / h for s in spacing)
    normalised = _segment._normalise(xp.asarray(image, dtype=xp.float32), "bright", xp)
    batch = _segment._build_batch(normalised, seeds, radius / h, spacing_n, dict(_segment.DEFAULT_WEIGHTS), 1.5, xp)
    phi = to_host(_segment._initial_level_sets(seeds, batch, 0.5 * radius / h, xp))
    phi = (phi + np.random.default_rng(0).normal(scale=0.7, size=phi.shape)).astype(np.float32)
    phi[1] = -1.0  # a vanished object
    valid = to_host(batch.valid)
    expected = fit_poses((phi > 0) & valid, moment_features(batch.box_shape, batch.spacing, np), batch.spacing,
                         batch.prior, np)
    got = to_host(CudaStepper(batch, block_length=10).fit(xp.asarray(phi)))
    k = ndim + ndim * ndim  # centre, rotation | scale, weights
    assert got.shape == expected.shape == (len(seeds), pose_size(ndim))
    np.testing.assert_allclose(got[:, :ndim], expected[:, :ndim], atol=1e-4)
    np.testing.assert_allclose(got[:, k:], expected[:, k:], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(np.abs(got[:, ndim:k]), np.abs(expected[:, ndim:k]), atol=1e-3)
    np.testing.assert_allclose(prior_sdf(got, batch.box_shape, batch.spacing, batch.prior, np),
                               prior_sdf(expected, batch.box_shape, batch.spacing, batch.prior, np), atol=1e-3)


def test_device_hull_counts_match_scikit_image():
    """The merge on the GPU: touching pairs (one bitmap pass), union masks (one launch) and 3D
    hull voxel counts (one launch of ivote_levelset_hull_count) against the NumPy pairs and
    masks and scikit-image's convex_hull_image, on the unions of touching synthetic nuclei."""
    from skimage.morphology import convex_hull_image

    from ivote._backend import default_xp
    from ivote.segment import _merge

    _, truth, *_ = synthetic_nuclei((32, 96, 96), radius=6, n_nuclei=60, overlap=0.3, seed=6)
    pairs = [tuple(int(v) for v in p) for p in _merge._touching_pairs(truth)][:16]
    device_pairs = _merge._touching_pairs(default_xp().asarray(truth, dtype=np.int32), int(truth.max()) + 3)
    np.testing.assert_array_equal(device_pairs, _merge._touching_pairs(truth))  # the bitmap kernel
    masks = _merge._union_masks(truth, pairs, None)  # touching nuclei: concave unions
    assert len(masks) >= 8
    device_masks = _merge._union_masks(default_xp().asarray(truth, dtype=np.int32), pairs, None)  # one launch
    assert all(d.shape == m.shape and np.array_equal(d, m) for d, m in zip(device_masks, masks))
    equations = [_merge._hull_equations_3d(m) for m in masks]
    got = _merge._device_hull_counts(equations, [m.shape for m in masks], default_xp())
    expected = [int(convex_hull_image(m).sum()) for m in masks]
    np.testing.assert_array_equal(got, expected)
    values = _merge._pair_solidities(masks, default_xp())
    np.testing.assert_allclose(values, [m.sum() / e for m, e in zip(masks, expected)], rtol=1e-12)


def test_device_hull_lower_bounds_match_host():
    """The merge's pre-test on the GPU (ivote_levelset_hull_columns and _round, float32) gives the
    host bound's values exactly (dyadic rationals), never above the hulls, and the merge with it
    decides as the NumPy path without it."""
    from scipy import ndimage as ndi

    from ivote._backend import default_xp
    from ivote.segment import _merge

    xp = default_xp()
    _, truth, *_ = synthetic_nuclei((32, 96, 96), radius=6, n_nuclei=60, overlap=0.3, seed=6)
    truth = truth.astype(np.int32)
    pairs = [tuple(int(v) for v in p) for p in _merge._touching_pairs(truth)]
    objects = ndi.find_objects(truth)
    regions = [tuple(slice(max(0, min(objects[a - 1][j].start, objects[b - 1][j].start) - 2),
                           max(objects[a - 1][j].stop, objects[b - 1][j].stop) + 1) for j in range(3))
               for a, b in pairs]  # the pair's box with a margin, as the merge's boxes leave
    for rounds in (1, 2):
        got = _merge._device_hull_lower_bounds(xp.asarray(truth), pairs, regions, rounds)
        np.testing.assert_array_equal(got, _merge._host_hull_lower_bounds(truth, pairs, regions, rounds))
    full = np.array([_merge._hull_count_3d(m) for m in _merge._union_masks(truth, pairs, None)])
    assert len(pairs) >= 8 and np.all(got <= full) and np.median(got / full) >= 0.9
    sizes = np.bincount(truth.ravel())
    for solidity in (0.8, 0.9, 0.95):
        merged = _merge.merge_split_objects(xp.asarray(truth), max_volume=1e9, min_solidity=solidity, sizes=sizes)
        np.testing.assert_array_equal(to_host(merged), _merge.merge_split_objects(
            truth, max_volume=1e9, min_solidity=solidity, sizes=sizes))


def test_device_merge_in_chunks_matches_one_launch(monkeypatch):
    """The hull bounds and the union masks of many pairs in several chunks (launches and
    transfers), as the merge splits them for many pairs of large boxes: the same values."""
    from ivote._backend import default_xp
    from ivote.segment import _merge

    xp = default_xp()
    _, truth, *_ = synthetic_nuclei((32, 96, 96), radius=6, n_nuclei=60, overlap=0.3, seed=6)
    truth = truth.astype(np.int32)
    pairs = [tuple(int(v) for v in p) for p in _merge._touching_pairs(truth)]
    regions = [tuple(slice(0, n - k % 3) for n in truth.shape) for k, _ in enumerate(pairs)]
    bounds = _merge._device_hull_lower_bounds(xp.asarray(truth), pairs, regions)
    masks = _merge._union_masks(xp.asarray(truth), pairs, None)
    monkeypatch.setattr(_merge, "_BOUND_COLUMNS", 2 * 65 * 193)
    monkeypatch.setattr(_merge, "_MASK_BYTES", 3 * truth.size)
    assert len(pairs) >= 8
    np.testing.assert_array_equal(_merge._device_hull_lower_bounds(xp.asarray(truth), pairs, regions), bounds)
    np.testing.assert_array_equal(bounds, _merge._host_hull_lower_bounds(truth, pairs, regions))
    chunked = _merge._union_masks(xp.asarray(truth), pairs, None)
    assert all(c.shape == m.shape and np.array_equal(c, m) for c, m in zip(chunked, masks))


@pytest.mark.parametrize("shape", [(128, 128), (40, 48, 48)])
def test_drop_faint_gpu_equals_numpy(shape):
    # the same labels and sizes kept on both backends: dimmed nuclei, seeds with no pixels, boxes
    # that leave the image
    from ivote.segment import _segment

    xp = ivote._backend.select_xp("cupy")
    image, truth, centers, spacing, radius = synthetic_nuclei(shape, radius=6, n_nuclei=20, seed=3)
    labels = np.zeros_like(truth)
    for k, centre in enumerate(centers, start=1):  # label k is the object of seed k
        labels[truth == truth[tuple(np.rint(centre).astype(int))]] = k
    image = image.copy()
    background = float(np.median(image[truth == 0]))
    for k in (2, 5, 9):
        image[labels == k] = background
    seeds = np.concatenate([centers, np.zeros((1, len(shape))), np.asarray([shape]) - 1.0])
    spacing_n = tuple(s / min(spacing) for s in spacing)
    results = []
    for module in (np, xp):
        normalised = _segment._normalise(ivote._backend.to_device(image, module), "bright", module)
        batch = _segment._build_batch(normalised, seeds, radius, spacing_n, dict(_segment.DEFAULT_WEIGHTS), 1.5,
                                      module)
        phi = module.zeros((len(seeds), 1), dtype=module.float32)
        kept, sizes = _segment._drop_faint(ivote._backend.to_device(labels, module), phi, batch, 0.1, module)
        results.append((to_host(kept), to_host(sizes)))
    (kept_np, sizes_np), (kept_gpu, sizes_gpu) = results
    assert {2, 5, 9} <= set(np.flatnonzero(sizes_np[1:] == 0) + 1)  # the dimmed ones went
    assert (sizes_np[1:] > 0).sum() >= 10
    np.testing.assert_array_equal(kept_gpu, kept_np)
    np.testing.assert_array_equal(sizes_gpu, sizes_np)
