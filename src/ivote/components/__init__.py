"""Connected components: instance labels of masks, components of graphs with
64-bit vertex ids, and clusters of nearby points (e.g. touching nuclei).

Each function runs on the GPU when one is available (CuPy, union-find kernels in
``ivote/kernels/components.cu``) and on SciPy otherwise, with identical results.
"""

from ._core import (
    GraphComponents,
    Labelling,
    PointClusters,
    cluster_points,
    connected_components,
    label,
)

__all__ = [
    "GraphComponents",
    "Labelling",
    "PointClusters",
    "cluster_points",
    "connected_components",
    "label",
]
