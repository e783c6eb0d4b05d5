"""Block detection on the GPU runs only the voters each pass needs (ivote.detect._reach), and stays exact."""

import numpy as np
import pytest

from ivote import _backend
from ivote.data import synthetic_nuclei
from ivote.detect import _reach, iterative_voting

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs a CUDA GPU with CuPy"),
]

pytest.importorskip("dask")

from ivote.distributed import detect_chunked  # noqa: E402


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f))
               for f in ("candidates", "candidate_scores", "candidate_contrasts", "points", "scores"))


@pytest.mark.parametrize("shape, chunks", [((256, 256), (45, 70)), ((40, 72, 72), (17, 30, 41))])
def test_chunked_gpu_equals_in_memory_and_one_reach_less_does_not(shape, chunks, monkeypatch):
    image, *_ = synthetic_nuclei(shape, radius=4.0, seed=37)
    image = image.astype(np.float32)
    image[..., shape[-1] // 2:] *= 0.4  # a block's own statistics are not the image's
    whole = iterative_voting(image, radius=4.0, backend="cupy")
    assert len(whole.points) > 10
    exact = detect_chunked(image, 4.0, chunks=chunks, scheduler="threads", backend="cupy")
    assert _same(exact, whole)
    margin = _reach.pass_margin

    def short(plan, k):
        return [m - int(r) for m, r in zip(margin(plan, k), _reach.pass_reach(plan))]

    monkeypatch.setattr(_reach, "pass_margin", short)
    assert not _same(detect_chunked(image, 4.0, chunks=chunks, scheduler="threads", backend="cupy"), whole)
