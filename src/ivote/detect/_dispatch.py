"""``ivote.iterative_voting``: the in-memory detection (``_voting``), or block by
block for a Dask array (``ivote.distributed.detect_chunked``, the same result),
and with ``detector=`` the candidates scored by a learned detector
(``ivote.learn``).

The routing lives here, above them, so that ``_voting`` never imports the
chunked engine or the learned detector that import it.
"""

from __future__ import annotations

import functools

from . import _voting

__all__ = ["iterative_voting"]


@functools.wraps(_voting.iterative_voting)
def iterative_voting(image, *args, **kwargs):
    detector = kwargs.pop("detector", None)
    if detector is not None:
        if type(image).__module__.split(".")[0] == "dask":
            raise ValueError("a learned detector is not applied block by block: compute the image (or a crop of "
                             "it) into memory first")
        from ..learn._hook import detect_with

        return detect_with(_voting.iterative_voting, detector, image, *args, **kwargs)
    if type(image).__module__.split(".")[0] == "dask":  # larger than memory, perhaps: block by block
        from ..distributed._detect import detect_dask

        return detect_dask(image, *args, **kwargs)
    return _voting.iterative_voting(image, *args, **kwargs)
