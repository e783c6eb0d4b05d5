"""NumPy reference of one level-set iteration: the readable oracle of ``levelset.cu``.

Every formula here is the one the CUDA kernel evaluates, in the same order and
in float32, so the two evolutions agree to rounding (float atomics make the GPU
sums order-dependent; nothing else differs).
"""

from __future__ import annotations

import numpy as np

from ._shape_prior import prior_sdf

__all__ = ["heaviside", "dirac", "heaviside_compact", "curvature", "region_sums", "overlap_canvas", "step"]

PI = np.float32(np.pi)
F32 = np.float32
CONTRAST_MIN = 0.0025  # (0.05)^2: below this contrast the region force is not amplified further


def heaviside(phi, eps):
    """Smooth Heaviside of Chan-Vese, H = 1/2 + atan(phi/eps)/pi (region means)."""
    return F32(0.5) + np.arctan(phi / F32(eps)) / PI


def dirac(phi, eps):
    """Its derivative, delta = (eps/pi) / (eps^2 + phi^2) (global support: fronts never stall)."""
    eps = F32(eps)
    return (eps / PI) / (eps * eps + phi * phi)


def heaviside_compact(phi, eps):
    """Heaviside with support |phi| < eps, used for the overlap penalty so that far-away
    objects add nothing: 0, 1, or (1 + phi/eps + sin(pi phi/eps)/pi)/2 in between."""
    eps = F32(eps)
    ramp = F32(0.5) * (F32(1) + phi / eps + np.sin(PI * phi / eps) / PI)
    return np.where(phi <= -eps, F32(0), np.where(phi >= eps, F32(1), ramp)).astype(np.float32)


def curvature(phi, spacing, kappa_max):
    """Mean curvature div(grad phi / |grad phi|) of every box, central differences with
    cross-derivatives, anisotropic ``spacing``, edge-replicated one-pixel halo.

    Returns an array of the same shape, clipped to +-kappa_max.
    """
    ndim = phi.ndim - 1
    padded = np.pad(phi, [(0, 0)] + [(1, 1)] * ndim, mode="edge")
    core = (slice(None),) + (slice(1, -1),) * ndim

    def shifted(offsets):
        index = [slice(None)]
        for axis in range(ndim):
            o = offsets.get(axis, 0)
            index.append(slice(1 + o, padded.shape[axis + 1] - 1 + o))
        return padded[tuple(index)]

    c = padded[core]
    h = [F32(s) for s in spacing]
    first, second = [], []
    for a in range(ndim):
        plus, minus = shifted({a: 1}), shifted({a: -1})
        first.append((plus - minus) / (F32(2) * h[a]))
        second.append((plus - F32(2) * c + minus) / (h[a] * h[a]))
    g2 = sum(d * d for d in first)
    num = np.zeros_like(c)
    for a in range(ndim):
        num = num + second[a] * (g2 - first[a] * first[a])
    for a in range(ndim):
        for b in range(a + 1, ndim):
            cross = (shifted({a: 1, b: 1}) - shifted({a: 1, b: -1}) - shifted({a: -1, b: 1})
                     + shifted({a: -1, b: -1})) / (F32(4) * h[a] * h[b])
            num = num - F32(2) * first[a] * first[b] * cross
    g2e = g2 + F32(1e-6)
    kappa = num / (g2e * np.sqrt(g2e))
    return np.clip(kappa, -F32(kappa_max), F32(kappa_max))


def region_sums(phi, batch):
    """Per object: sum of H(phi) I and of H(phi) over the valid cells of its box."""
    h = heaviside(phi, batch.eps) * batch.valid
    n = phi.shape[0]
    return (h * batch.image_box).reshape(n, -1).sum(axis=1), h.reshape(n, -1).sum(axis=1)


def overlap_canvas(phi, batch):
    """Image-sized sum over objects of the compact Heaviside of each level set."""
    hc = heaviside_compact(phi, batch.eps)[batch.valid]
    return np.bincount(batch.global_index[batch.valid], weights=hc, minlength=batch.image_size).astype(np.float32)


def step(phi, batch, pose, psi=None, sums=None, canvas=None):
    """One explicit iteration for all objects: phi + dt * delta(phi) * F with
    F = mu kappa + clip([-l1 (I - c_in)^2 + l2 (I - c_out)^2] / max((c_in - c_out)^2, 0.05^2), +-max(l1, l2))
        + beta clip(psi - phi, -1, 1)
        - omega clip(sum of the other objects' Heavisides, 0, 1).
    Box borders and cells outside the image keep their value. ``psi`` (the prior on the
    boxes), ``sums`` (from :func:`region_sums`) and ``canvas`` (:func:`overlap_canvas`) are
    computed from ``phi`` and ``pose`` when not given."""
    w = batch.weights
    s_hi, s_h = region_sums(phi, batch) if sums is None else sums
    c_in = s_hi.astype(np.float32) / np.maximum(s_h.astype(np.float32), F32(1e-6))
    c_out = (batch.sum_image - s_hi.astype(np.float32)) / np.maximum(batch.n_valid - s_h.astype(np.float32), F32(1e-6))
    shape = (-1,) + (1,) * (phi.ndim - 1)
    c_in, c_out = c_in.reshape(shape), c_out.reshape(shape)
    if canvas is None:
        canvas = overlap_canvas(phi, batch)
    others = np.clip(canvas[batch.global_index] - heaviside_compact(phi, batch.eps), F32(0), F32(1))
    if psi is None:  # the prior is fixed between fits: callers evaluate it once per block
        psi = prior_sdf(pose, phi.shape[1:], batch.spacing, batch.prior, np)
    image = batch.image_box
    # Chan-Vese fit, divided by the object's contrast so that dim and bright nuclei move alike
    contrast = np.maximum((c_in - c_out) * (c_in - c_out), F32(CONTRAST_MIN))
    region_max = F32(max(w["lambda1"], w["lambda2"]))
    region = (-F32(w["lambda1"]) * (image - c_in) ** 2 + F32(w["lambda2"]) * (image - c_out) ** 2) / contrast
    force = (
        F32(w["mu"]) * curvature(phi, batch.spacing, batch.kappa_max)
        + np.clip(region, -region_max, region_max)
        + F32(w["beta"]) * np.clip(psi - phi, F32(-1), F32(1))
        - F32(w["omega"]) * others
    )
    updated = phi + F32(batch.dt) * dirac(phi, batch.eps) * force
    return np.where(batch.frozen, phi, updated).astype(np.float32)
