"""Names of the layers the docks write (Qt-free): ``'<kind>: <image>'``, so that each dock finds the
others' results (Segment the seeds Detect found, Label and count the image Segment outlined)."""

from __future__ import annotations

__all__ = ["COMPONENTS", "FEATURES", "LABELS", "NUCLEI", "result_name", "source_name"]

NUCLEI, LABELS, COMPONENTS, FEATURES = "nuclei", "labels", "components", "features"


def result_name(kind: str, image_name: str) -> str:
    """The name of a dock's result of ``kind`` for the image layer ``image_name``.

    >>> result_name(LABELS, "cells")
    'labels: cells'
    """
    return f"{kind}: {image_name}"


def source_name(layer_name: str, kind: str) -> str | None:
    """The image layer a result of ``kind`` was made from, or None when ``layer_name`` is not one.

    >>> source_name("labels: cells", LABELS), source_name("cells", LABELS)
    ('cells', None)
    """
    prefix = result_name(kind, "")
    return layer_name[len(prefix):] if layer_name.startswith(prefix) else None
