"""The Numba level-set kernels (segment/_numba.py) against the NumPy reference (segment/_reference.py):
each entry point on the same batch, then whole segmentations (per-object IoU >= 0.99)."""

import math

import numpy as np
import pytest

pytest.importorskip("numba")

from ivote.data import synthetic_nuclei
from ivote.segment import _numba, _segment
from ivote.segment import _reference as ref
from ivote.segment._shape_prior import fit_poses, moment_features, prior_sdf

CASES = {
    "2d": dict(shape=(72, 80), spacing=(1.0, 1.0), radius=7.0, seed=3),
    "2d-aniso": dict(shape=(64, 72), spacing=(0.5, 0.4), radius=3.5, seed=6),
    "3d-aniso": dict(shape=(14, 40, 44), spacing=(2.0, 0.5, 0.5), radius=4.0, seed=4),
}


def _evolved_batch(case, iterations=20):
    """A batch of synthetic nuclei (some boxes crossing the image edge) and a level set evolved by the
    reference, so that fronts are curved, touch their neighbours and lie between cells."""
    image, truth, centers, spacing, radius = synthetic_nuclei(
        case["shape"], spacing=case["spacing"], radius=case["radius"], seed=case["seed"], overlap=0.3)
    centers = np.vstack([centers, np.zeros((1, len(case["shape"])))])  # a box mostly outside the image
    h = min(spacing)
    spacing_n = tuple(s / h for s in spacing)
    normalised = _segment._normalise(image.astype(np.float32), "bright", np)
    batch = _segment._build_batch(normalised, centers, radius / h, spacing_n, dict(_segment.DEFAULT_WEIGHTS), 1.5, np)
    phi = _segment._initial_level_sets(centers, batch, 0.5 * radius / h, np)
    stepper = ref.ReferenceStepper(batch)
    stepper.prior(stepper.fit(phi))
    phi = stepper.run(phi, iterations)
    return batch, phi, radius / h


@pytest.mark.parametrize("name", list(CASES))
def test_step_equals_reference(name):
    batch, phi, _ = _evolved_batch(CASES[name])
    pose = fit_poses((phi > 0) & batch.valid, moment_features(batch.box_shape, batch.spacing, np), batch.spacing,
                     batch.prior, np)
    psi = prior_sdf(pose, batch.box_shape, batch.spacing, batch.prior, np)
    stepper = _numba.NumbaStepper(batch)
    stepper.psi[...] = psi.reshape(stepper.psi.shape)
    expected = ref.step(phi, batch, None, psi)
    got = stepper.run(phi, 1)
    assert got.shape == phi.shape and got.dtype == np.float32
    # the update itself, relative to its size (float32 rounding, polynomial atan/sin)
    np.testing.assert_allclose(got - phi, expected - phi, rtol=1e-4, atol=1e-6)
    assert not np.array_equal(expected, phi)  # the step moved something
    for _ in range(9):
        expected = ref.step(expected, batch, None, psi)
    np.testing.assert_allclose(stepper.run(phi, 10), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_fit_prior_reinitialise_and_labels_equal_reference(name):
    batch, phi, radius_n = _evolved_batch(CASES[name])
    stepper = _numba.NumbaStepper(batch)
    reference = ref.ReferenceStepper(batch)
    pose = reference.fit(phi)
    np.testing.assert_allclose(stepper.fit(phi), pose, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stepper.prior(pose), reference.prior(pose), rtol=1e-5, atol=1e-4)
    clip = max(3.0, 0.5 * radius_n)
    expected = ref.reinitialise(phi, batch, clip, np)
    got = stepper.reinitialise(phi, clip)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(stepper.labels(expected), ref.labels(expected, batch, np))


def test_reinitialise_without_any_inside_cell():
    batch, phi, _ = _evolved_batch(CASES["2d"], iterations=0)
    empty = -np.abs(phi) - 1
    got = _numba.NumbaStepper(batch).reinitialise(empty, 4.0)
    np.testing.assert_array_equal(got, ref.reinitialise(empty, batch, 4.0, np))


def test_smooth_functions_match_numpy():
    from numba import njit

    @njit
    def apply(values, inv_eps):
        h = np.empty_like(values)
        hc = np.empty_like(values)
        for i in range(values.size):
            h[i] = _numba._heaviside(values[i], inv_eps)
            hc[i] = _numba._heaviside_compact(values[i], inv_eps)
        return h, hc

    values = np.concatenate([np.linspace(-40, 40, 20001), [0.0, 1e-30, -1e-30, 1e20, -1e20]]).astype(np.float32)
    h, hc = apply(values, np.float32(1.0))
    np.testing.assert_allclose(h, ref.heaviside(values, 1.0), atol=3e-7)
    np.testing.assert_allclose(hc, ref.heaviside_compact(values, 1.0), atol=3e-7)
    assert h[-2] == pytest.approx(1.0, abs=1e-6) and h[-1] == pytest.approx(0.0, abs=1e-6)


def _per_object_iou(a, b):
    ious = {}
    for label in np.union1d(np.unique(a), np.unique(b)):
        if label == 0:
            continue
        both, either = np.sum((a == label) & (b == label)), np.sum((a == label) | (b == label))
        ious[int(label)] = both / either
    return ious


@pytest.mark.parametrize("shape, spacing, radius, iterations", [
    ((96, 96), (1.0, 1.0), 8.0, 200),
    ((80, 96), (0.5, 0.5), 4.0, 200),
    ((16, 48, 48), (2.0, 0.5, 0.5), 4.5, 120),
])
def test_segmentation_equals_reference_per_object(monkeypatch, shape, spacing, radius, iterations):
    image, truth, centers, spacing, radius = synthetic_nuclei(shape, spacing=spacing, radius=radius, seed=7, overlap=0.3)
    kwargs = dict(radius=radius, spacing=spacing, iterations=iterations)
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")
    expected = _segment.segment_nuclei(image, centers, **kwargs)
    monkeypatch.setenv("IVOTE_BACKEND", "numba")
    got = _segment.segment_nuclei(image, centers, **kwargs)
    ious = _per_object_iou(got, expected)
    assert len(ious) >= max(3, math.ceil(0.7 * len(centers)))
    worst = min(ious, key=ious.get)
    assert ious[worst] >= 0.99, f"object {worst}: IoU {ious[worst]:.3f}"


def test_one_compiled_signature_per_kernel_for_2d_3d_and_any_input_type(monkeypatch):
    """2D runs as a one-plane volume and every argument is cast before the call: whatever the
    image's dtype, dimension, size or spacing, each kernel is compiled (and cached) once."""
    monkeypatch.setenv("IVOTE_BACKEND", "numba")
    for shape, spacing, dtype in [((40, 44), None, np.uint8), ((36, 40), (2, 1), np.float64),
                                  ((10, 24, 26), (2.0, 0.5, 0.5), np.uint16), ((8, 20, 20), None, np.float32)]:
        image, _, centers, *_ = synthetic_nuclei(shape, radius=4.0, seed=2)
        image = (image / image.max() * 200).astype(dtype)
        _segment.segment_nuclei(image, centers, radius=4.0, spacing=spacing, iterations=4, reinit_every=2)
    kernels = [_numba._step, _numba._canvas, _numba._reinitialise, _numba._prior]
    assert {k.__name__: len(k.signatures) for k in kernels} == {k.__name__: 1 for k in kernels}


@pytest.mark.parametrize("name", ["2d-aniso", "3d-aniso"])
def test_fit_after_reinitialise_reads_its_moments(name):
    """The moments measured by reinitialise (its inside cells) are those a fresh pass over its
    output measures: the fit that reads them is bit-identical, and is read once."""
    batch, phi, radius_n = _evolved_batch(CASES[name])
    stepper = _numba.NumbaStepper(batch)
    out = stepper.reinitialise(phi, max(3.0, 0.5 * radius_n))
    assert stepper._reinitialised is not None and stepper._reinitialised[0] is out
    from_reinitialise = stepper.fit(out)
    assert stepper._reinitialised is None
    np.testing.assert_array_equal(from_reinitialise, stepper.fit(out.copy()))
    np.testing.assert_allclose(from_reinitialise, ref.ReferenceStepper(batch).fit(out), rtol=1e-5, atol=1e-5)
