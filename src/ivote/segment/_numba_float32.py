"""The float32 constants and smooth functions of ``kernels/levelset.cu`` that the Numba
level-set kernels share (``_numba.py``, ``_numba_distances.py``): arctan and sin(pi u)
as polynomials (libm would stop the loops from vectorising; both within a few float32
ulps), the Heavisides, and the box's valid x range. Every helper is inlined into its
kernel (``_inline``): none compiles on its own.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._numba_intrinsics import _max, _min

F32 = np.float32
_ZERO, _HALF, _ONE, _TWO = F32(0.0), F32(0.5), F32(1.0), F32(2.0)
_PI = F32(np.pi)
_INV_PI = F32(1.0 / np.pi)
_PI_2, _PI_4 = F32(np.pi / 2), F32(np.pi / 4)
_TAN_PI_8 = F32(0.4142135623730950)
_G2_EPS = F32(1e-6)
_CONTRAST_MIN = F32(0.0025)
_CONTRAST_FLOOR = F32(0.05)  # c_in >= c_out + 0.05: nuclei are brighter than their surroundings (_reference)
_EDT_INF = 1e30
# reassociation lets the row loops (and their sums) vectorise; results differ from the
# reference by rounding only, as the CUDA kernels' do
_FAST = {"nsz", "arcp", "contract", "reassoc"}
_inline = njit(inline="always", error_model="numpy")
"""Helpers of one kernel: inlined into it by Numba (their caller's fastmath applies), not compiled apart."""


# -- the smooth functions of levelset.cu (float32) ------------------------------------------------
@_inline
def _atan(x):
    """arctan in float32 (Cephes' atanf: |x| > 1 folds to pi/2 - atan(1/|x|), above tan(pi/8) to
    pi/4 + atan((b - 1)/(b + 1)), then a degree-9 odd polynomial; within 2e-7 of arctan).
    Selects, not branches, and error_model="numpy" (no zero-division checks) keep the loops
    that call it vectorised."""
    a = abs(x)
    flip = a > _ONE
    b = _min(a, _ONE / _max(a, F32(1e-30)))
    mid = b > _TAN_PI_8
    numerator = b - _ONE if mid else b
    denominator = b + _ONE if mid else _ONE
    reduced = numerator / denominator
    z = reduced * reduced
    y = ((((F32(8.05374449538e-2) * z - F32(1.38776856032e-1)) * z + F32(1.99777106478e-1)) * z
          - F32(3.33329491539e-1)) * z * reduced + reduced) + (_PI_4 if mid else _ZERO)
    y = _PI_2 - y if flip else y
    return math.copysign(y, x)


@_inline
def _sinpi(u):
    """sin(pi u) for |u| <= 1 in float32 (Taylor series to degree 13 on [0, pi/2])."""
    a = abs(u)
    r = _min(a, _ONE - a) * _PI
    r2 = r * r
    s = r * (_ONE + r2 * (F32(-1 / 6) + r2 * (F32(1 / 120) + r2 * (F32(-1 / 5040) + r2 * (
        F32(1 / 362880) + r2 * (F32(-1 / 39916800) + r2 * F32(1 / 6227020800)))))))
    return math.copysign(s, u)


@_inline
def _heaviside(phi, inv_eps):
    return _HALF + _atan(phi * inv_eps) * _INV_PI


@_inline
def _heaviside_compact(phi, inv_eps):
    u = _min(_max(phi * inv_eps, -_ONE), _ONE)  # u = +-1 gives exactly 1 and 0
    return _HALF * (_ONE + u + _sinpi(u) * _INV_PI)


@_inline
def _valid_x(origin_x, bx, ix):
    """The box's x range [lo, hi) inside the image."""
    return _max(0, -origin_x), _min(bx, ix - origin_x)
