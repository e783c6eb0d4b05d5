"""The sizes of one image shape for a ConvRBM (``_convrbm.py``): pixels, blocks after
space-to-depth, the hidden extent ('same' or 'valid') and the FFT shape."""

from __future__ import annotations

from dataclasses import dataclass

from ._space_to_depth import fft_size


@dataclass(frozen=True)
class _Geometry:
    """Sizes of one image shape: pixels, blocks (after space-to-depth), hidden extent, FFT shape."""

    shape: tuple  # image, pixels
    stride: int
    filter_shape: tuple  # pixels
    blocks: tuple  # depth-domain visible extent, ceil(shape / stride)
    filter_blocks: tuple  # ceil(filter_shape / stride)
    centre: tuple  # r: filter offset in blocks
    fft_shape: tuple
    hidden: tuple  # hidden extent in blocks: ``blocks`` ('same') or ``blocks - filter_blocks + 1`` ('valid')

    @classmethod
    def of(cls, shape, stride, filter_shape, choose_fft_shape=None, extent="same"):
        """``choose_fft_shape(minimum_shape)`` picks the FFT shape (default: smallest 5-smooth).

        ``extent='same'``: a hidden unit on every block, the filter centred on
        it; the FFT shape must hold the hidden extent plus the filter's reach
        on either side. ``extent='valid'``: hidden units only where the whole
        filter lies inside the image, the filter starting at the unit
        (``r = 0``); no product of a valid correlation, of its transpose or of
        the weight statistics wraps around at the image's own size, so the FFT
        shape is the visible extent itself.
        """
        blocks = tuple(-(-n // stride) for n in shape)
        filter_blocks = tuple(-(-k // stride) for k in filter_shape)
        if extent == "valid":
            centre = (0,) * len(blocks)
            hidden = tuple(n - k + 1 for n, k in zip(blocks, filter_blocks))
            if min(hidden) < 1:
                raise ValueError(f"hidden_extent='valid' needs images (or patches) at least as large as the filters "
                                 f"{tuple(filter_shape)}; got shape {tuple(shape)}")
            minimum = blocks
        else:
            centre = tuple((k - 1) // 2 for k in filter_blocks)
            hidden = blocks
            # no wrap-around: the hidden and visible extents plus the filter's reach on either side
            minimum = tuple(n + max(r, k - 1 - r) for n, k, r in zip(blocks, filter_blocks, centre))
        fft_shape = choose_fft_shape(minimum) if choose_fft_shape else tuple(fft_size(n) for n in minimum)
        return cls(tuple(shape), stride, tuple(filter_shape), blocks, filter_blocks, centre, tuple(fft_shape),
                   hidden)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def n_channels(self):
        return self.stride**self.ndim

    @property
    def freq_shape(self):
        return self.fft_shape[:-1] + (self.fft_shape[-1] // 2 + 1,)
