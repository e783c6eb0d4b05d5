"""napari-ivote: find, outline and count nuclei in 2D images and 3D volumes.

The core (this package outside ``ivote.napari``) is array in, array out, runs on
CuPy when a GPU is there and on NumPy everywhere else, and never imports napari,
Qt or magicgui.
"""

from importlib.metadata import PackageNotFoundError, version

from ._backend import BackendError, backend_name, cupy_available
from .data import synthetic_nuclei
from .metrics import match_labels, match_points, precision_recall_curve

try:
    __version__ = version("napari-ivote")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.1.0.dev0+src"

__all__ = [
    "BackendError",
    "__version__",
    "backend_name",
    "cupy_available",
    "match_labels",
    "match_points",
    "precision_recall_curve",
    "synthetic_nuclei",
]
