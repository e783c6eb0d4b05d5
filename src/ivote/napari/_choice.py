"""Which image layer a dock offers first (Qt-free): the one the user picked, else the image last detected on
(the newest ``nuclei: <image>`` Points layer names it), else a layer named like a nuclear stain (a 2-channel
file opens as ``Hoechst`` and ``noise``: the newest layer, ``noise``, was the default), else magicgui's default."""

from __future__ import annotations

import re

__all__ = ["NUCLEAR_STAINS", "is_nuclear_stain", "last_detected", "preferred_image"]

NUCLEAR_STAINS = ("dapi", "hoechst", "nuclei", "nucleus", "nuclear", "draq5", "draq7", "sytox", "topro", "to-pro",
                  "pi", "propidium", "h2b", "hematoxylin", "haematoxylin", "nuc")
"""Words of a layer name that mark a nuclear stain (case-insensitive, whole words or prefixes like 'DAPI_ch0')."""


def is_nuclear_stain(name: str) -> bool:
    """Whether a layer name says it holds a nuclear stain.

    >>> is_nuclear_stain("Hoechst"), is_nuclear_stain("C1-DAPI.tif"), is_nuclear_stain("noise"), is_nuclear_stain("pink")
    (True, True, False, False)
    """
    words = re.split(r"[^a-z0-9]+", str(name).lower())
    return any(word in NUCLEAR_STAINS or any(word.startswith(s) and len(s) > 3 for s in NUCLEAR_STAINS)
               for word in words if word)


def last_detected(layers) -> object | None:
    """The image layer of the newest Run's points (``metadata['ivote_image']`` of a layer not a preview)."""
    names = [layer.name for layer in layers]
    for layer in reversed(list(layers)):
        image = getattr(layer, "metadata", {}).get("ivote_image")
        if image in names and layer.metadata.get("ivote_kind") != "preview" and type(layer).__name__ == "Points":
            return layers[image]
    return None


def preferred_image(choices, *, picked=None, detected=None):
    """The image to offer among ``choices`` (layers, newest first): ``picked`` (the user's), else ``detected``
    (:func:`last_detected`), else the newest named like a nuclear stain, else None (keep the default)."""
    for layer in (picked, detected):
        if layer is not None and any(layer is c for c in choices):
            return layer
    return next((c for c in choices if is_nuclear_stain(c.name)), None)
