"""GPU iterations: one fused launch of ``ivote_levelset_step`` per iteration for all objects.

Buffers (phi ping-pong, three image-sized overlap canvases and three per-object
sum buffers rotating with the iteration) are allocated once; a block of
iterations (prime + ``block_length`` steps) is captured once as a CUDA graph
and replayed, so a block costs one graph launch and no host round trip.
"""

from __future__ import annotations

import numpy as np

from .._backend import get_array_module, get_kernel, to_host

__all__ = ["CudaStepper", "TILES"]

# (TZ, TY, TX) per dimensionality: 256 threads in 2D, 512 in 3D
TILES = {2: (1, 16, 16), 3: (4, 8, 16)}


class CudaStepper:
    """Advance a :class:`~._segment.Batch` on the GPU, ``run(phi, pose, count)``."""

    def __init__(self, batch, *, block_length: int, use_graph: bool = True, kernel=None):
        xp = get_array_module(batch.valid)
        self.xp = xp
        ndim = len(batch.box_shape)
        n = batch.valid.shape[0]
        box3 = (1,) * (3 - ndim) + tuple(batch.box_shape)
        image3 = (1,) * (3 - ndim) + tuple(batch.image_shape)
        tz, ty, tx = TILES[ndim]
        tiles = tuple(-(-b // t) for b, t in zip(box3, (tz, ty, tx)))
        self.grid = (n, tiles[0] * tiles[1] * tiles[2], 1)
        self.block = (tx, ty, tz)
        phi_bytes = n * int(np.prod(box3)) * 4
        itype = "long long" if max(phi_bytes, batch.image_size * 4) >= 2**31 else "int"
        name = f"ivote_levelset_step<{ndim}, {tz}, {ty}, {tx}, {itype}>"
        self.kernel = kernel if kernel is not None else get_kernel("levelset", name, name_expressions=(name,))
        self.kernel_name = name
        prior = batch.prior
        h3 = (1.0,) * (3 - ndim) + tuple(batch.spacing)
        w = batch.weights
        self.coef = xp.asarray(np.array(
            [w["lambda1"], w["lambda2"], w["mu"], w["beta"], w["omega"], batch.eps, batch.dt, batch.kappa_max,
             *h3, prior.extent], dtype=np.float32))
        self.dims = xp.asarray(np.array(
            [*box3, *image3, *tiles, prior.grid_size, prior.n_modes, batch_pose_size(ndim)], dtype=np.int32))
        origins = np.zeros((n, 3), dtype=np.int32)
        origins[:, 3 - ndim:] = to_host(batch.origins)
        self.origins = xp.asarray(origins)
        self.templates = xp.asarray(prior.templates)
        self.image = xp.ascontiguousarray(batch.image, dtype=xp.float32)
        self.region_consts = xp.ascontiguousarray(xp.stack([batch.sum_image, batch.n_valid], axis=1), dtype=xp.float32)
        self.phi = [xp.empty(batch.valid.shape, dtype=xp.float32) for _ in range(2)]
        self.canvas = [xp.zeros(batch.image_size, dtype=xp.float32) for _ in range(3)]
        self.sums = [xp.zeros((n, 2), dtype=xp.float32) for _ in range(3)]
        self.pose = xp.zeros((n, batch_pose_size(ndim)), dtype=xp.float32)
        self.block_length = int(block_length)
        self.use_graph = use_graph
        self.graph = None
        self.blocks_run = 0
        self.cells = n * int(np.prod(box3))

    def _launch(self, k: int, phi_in, phi_out, prime: bool):
        """Launch iteration k (prime: k = 0, copy and accumulate only)."""
        c, s = self.canvas, self.sums
        self.kernel(
            self.grid, self.block,
            (phi_in, phi_out, self.image, c[k % 3], c[(k + 1) % 3], c[(k + 2) % 3],
             s[k % 3], s[(k + 1) % 3], s[(k + 2) % 3], self.region_consts, self.origins, self.pose,
             self.templates, self.coef, self.dims, np.int32(1 if prime else 0)),
        )

    def _enqueue(self, count: int):
        """Zero the accumulators, prime from phi[0], then ``count`` steps; returns the output index."""
        for buffer in self.canvas + self.sums:
            buffer.fill(0)
        self._launch(0, self.phi[0], self.phi[1], True)
        current = 1
        for k in range(1, count + 1):
            self._launch(k, self.phi[current], self.phi[1 - current], False)
            current = 1 - current
        return current

    def steps_only(self, count: int, start: int = 1):
        """Launch ``count`` bare steps (for benchmarks of the fused kernel alone)."""
        current = 1
        for k in range(start, start + count):
            self._launch(k, self.phi[current], self.phi[1 - current], False)
            current = 1 - current

    def run(self, phi, pose, count: int):
        xp = self.xp
        self.phi[0][...] = phi
        self.pose[...] = pose
        if count == self.block_length and self.use_graph and self.blocks_run > 0:
            if self.graph is None:
                self.graph = self._capture(count)
            if self.graph is not None:
                self.graph.launch()
                self.blocks_run += 1
                return self.phi[(count + 1) % 2]
        current = self._enqueue(count)
        self.blocks_run += 1
        return self.phi[current]

    def _capture(self, count: int):
        xp = self.xp
        try:
            stream = xp.cuda.Stream(non_blocking=True)
            xp.cuda.get_current_stream().synchronize()
            with stream:
                stream.begin_capture()
                try:
                    self._enqueue(count)
                finally:
                    graph = stream.end_capture()
            graph.upload()
            return graph
        except Exception:  # capture unsupported here: launch one by one
            self.use_graph = False
            return None


def batch_pose_size(ndim: int) -> int:
    from ._shape_prior import pose_size

    return pose_size(ndim)
