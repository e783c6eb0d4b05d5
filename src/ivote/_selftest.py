"""A GPU self-test: compile ``kernels/selftest.cu`` through the loader and check it."""

from __future__ import annotations

import numpy as np

from ._backend import default_xp, get_kernel, to_host

__all__ = ["kernel_selftest"]


def kernel_selftest(n: int = 1 << 20) -> str:
    """Run ``ivote_scaled_add<float>`` on the GPU and compare with NumPy.

    Returns a one-line report; raises ``AssertionError`` on a wrong result and
    ``BackendError`` without a GPU.
    """
    xp = default_xp()
    name = "ivote_scaled_add<float>"
    kernel = get_kernel("selftest", name, defines={"SELFTEST_OFFSET": 0.5}, name_expressions=(name,))
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n).astype(np.float32)
    y_host = rng.standard_normal(n).astype(np.float32)
    x, y = xp.asarray(x_host), xp.asarray(y_host)
    out = xp.full(n, np.nan, dtype=np.float32)  # poisoned: every element must be written
    kernel((256,), (256,), (x, y, out, np.float32(3.0), np.int64(n)))
    expected = np.float32(3.0) * x_host + y_host + np.float32(0.5)
    result = to_host(out)
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)
    return f"ok: {name} on {n} elements matches NumPy"
