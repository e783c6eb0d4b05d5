"""Shared fixtures of the GPU tests."""

import contextlib

import pytest

from ivote import _backend


class PoolCap:
    """CuPy's default memory pool with a cap relative to what it holds, for tests that run under a limit.

    CuPy's cap bounds the pool's size (``total_bytes``: blocks in use *and* free blocks it keeps), and
    ``free_all_blocks`` cannot return a freed block of which a part is still in use (a small array
    allocated later from a large freed buffer: a memoized table, a cuFFT plan). What the pool holds
    therefore depends on every test that ran before in the process, and a fixed cap (or one above
    ``used_bytes``) is loose or tight depending on the order. So the fixture empties the pool
    (``free_gpu_memory``), then *takes* the free parts it could not return (allocates them, held until
    the test ends), and :meth:`cap` does the same (without dropping the caches) and sets the cap at the
    pool's size plus ``extra``: a run under it can get exactly ``extra`` new bytes, whatever ran before.
    """

    def __init__(self, cupy):
        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self.previous = self.pool.get_limit()
        self.taken = []

    def empty(self) -> None:
        """Return what can be returned (``free_gpu_memory``), then take the free parts left."""
        _backend.free_gpu_memory()
        self.take_free()

    def take_free(self) -> None:
        """Return the pool's whole free blocks (buffers freed by a warm-up run), then allocate the free parts
        of split blocks in this thread's arena (held until the test ends), so that a run cannot be served
        from them."""
        pool = self.pool
        pool.free_all_blocks()
        total = pool.total_bytes()
        pool.set_limit(size=total)  # no new memory: every allocation below takes a free part
        try:
            size = pool.free_bytes()
            while size >= 512 and pool.free_bytes() and pool.total_bytes() == total:
                try:
                    self.taken.append(self.cupy.empty(size, dtype=self.cupy.uint8))
                    size = min(size, pool.free_bytes())
                except self.cupy.cuda.memory.OutOfMemoryError:
                    size //= 2
        finally:
            pool.set_limit(size=self.previous)

    def cap(self, extra_bytes: int) -> int:
        """Take the free blocks, then cap the pool at its size plus ``extra_bytes`` (a run may add that
        much, never less, never more); returns the cap."""
        self.take_free()
        limit = int(self.pool.total_bytes()) + int(extra_bytes)
        self.pool.set_limit(size=limit)
        return limit

    @contextlib.contextmanager
    def blocks_grown(self, module):
        """Within the block: ``module.gpu_limit`` (a chunked stage's cap) records what each block added to the
        pool under its cap; yields that list."""
        grown, pool = [], self.pool

        class Recording(module.gpu_limit):
            def __enter__(self):
                super().__enter__()
                self.start = pool.total_bytes()

            def __exit__(self, *exc):
                grown.append(pool.total_bytes() - self.start)  # before the block's buffers are freed
                return super().__exit__(*exc)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "gpu_limit", Recording)
            yield grown

    def lift(self) -> None:
        self.pool.set_limit(size=self.previous)

    def restore(self) -> None:
        self.taken.clear()
        self.lift()
        _backend.free_gpu_memory()


@pytest.fixture
def gpu_pool():
    """A :class:`PoolCap` on an emptied pool (``gpu_pool.cap(n)``: a run may add ``n`` bytes); the cap
    before the test is restored and the memory freed afterwards, even when the test fails."""
    cupy = _backend._cupy()
    if cupy is None:
        pytest.skip("needs a CUDA GPU with CuPy")
    capped = PoolCap(cupy)
    capped.empty()
    yield capped
    capped.restore()
