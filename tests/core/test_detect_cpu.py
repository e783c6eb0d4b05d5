"""The NumPy voting passes over cone tables (_cpu) equal the reference's exactly."""

import numpy as np
import pytest
from scipy import ndimage

from ivote.data import synthetic_nuclei
from ivote.detect import _cpu, _reference
from ivote.detect._plan import make_plan

CASES = [
    dict(shape=(80, 72), spacing=(1.0, 1.0), radius=6.0, sign=1.0),
    dict(shape=(64, 70), spacing=(0.4, 0.4), radius=3.2, sign=-1.0),
    dict(shape=(48, 44), spacing=(1.3, 1.3), radius=9.1, sign=1.0),  # offsets reach past floor(r / s)
    dict(shape=(12, 40, 36), spacing=(2.0, 0.5, 0.5), radius=4.0, sign=1.0),
    dict(shape=(20, 24, 28), spacing=(1.0, 1.0, 1.0), radius=5.0, sign=1.0),
]


def smoothed(case, seed):
    sample = synthetic_nuclei(case["shape"], spacing=case["spacing"], radius=case["radius"], seed=seed,
                              polarity="bright" if case["sign"] > 0 else "dark")
    image = (sample.image - sample.image.min()) / np.ptp(sample.image)
    return ndimage.gaussian_filter(image, [2.0 * min(case["spacing"]) / s for s in case["spacing"]])


@pytest.mark.parametrize("index", range(len(CASES)))
def test_cpu_passes_equal_the_reference(index):
    case = CASES[index]
    image = smoothed(case, seed=40 + index)
    plan = make_plan(case["radius"], case["spacing"], len(case["shape"]))
    expected = _reference.run_passes(image.copy(), plan, case["sign"])
    calls = []
    got = _cpu.run_passes([image.copy()], plan, case["sign"], lambda i, n: calls.append((i, n)))
    assert expected.sum() > 0 and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert calls == [(i, plan.n_passes) for i in range(plan.n_passes)]


def test_cpu_passes_on_noise_and_flat_images():
    rng = np.random.default_rng(5)
    plan = make_plan(4.0, (1.0, 1.0), 2)
    noise = ndimage.gaussian_filter(rng.random((40, 40)), 1.0)
    np.testing.assert_array_equal(_cpu.run_passes(noise.copy(), plan, 1.0), _reference.run_passes(noise, plan, 1.0))
    flat = np.zeros((16, 16))
    assert not _cpu.run_passes(flat, plan, 1.0).any()
