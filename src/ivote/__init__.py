"""napari-ivote: find, outline and count nuclei in 2D images and 3D volumes.

The core (this package outside ``ivote.napari``) is array in, array out, runs on
CuPy when a GPU is there and on NumPy everywhere else, and never imports napari,
Qt or magicgui.
"""

from importlib.metadata import PackageNotFoundError, version

from ._backend import BackendError, backend_name, cupy_available, free_gpu_memory
from .components import GraphComponents, Labelling, PointClusters, cluster_points, connected_components, label
from ._files import AxesError, ImageFile, open_image, write_image
from ._frames import FrameDetections, detect_frames, segment_frames
from .data import synthetic_nuclei
from .errors import InputFileError, IvoteError, ParameterTypeError, ResourceLimitError, TrainingDivergedError
from .detect import Detections, hematoxylin_density, iterative_voting
from .features import ConvRBM
from .learn import LearnedDetector, learn_detector
from .measure import measure_nuclei
from .metrics import match_labels, match_points, precision_recall_curve
from .segment import segment_nuclei

try:
    __version__ = version("napari-ivote")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.1.0.dev0+src"

__all__ = [
    "AxesError",
    "BackendError",
    "ConvRBM",
    "Detections",
    "FrameDetections",
    "ImageFile",
    "__version__",
    "GraphComponents",
    "InputFileError",
    "IvoteError",
    "Labelling",
    "LearnedDetector",
    "ParameterTypeError",
    "PointClusters",
    "ResourceLimitError",
    "TrainingDivergedError",
    "backend_name",
    "cluster_points",
    "connected_components",
    "cupy_available",
    "detect_frames",
    "free_gpu_memory",
    "hematoxylin_density",
    "iterative_voting",
    "label",
    "learn_detector",
    "match_labels",
    "match_points",
    "measure_nuclei",
    "open_image",
    "precision_recall_curve",
    "segment_frames",
    "segment_nuclei",
    "synthetic_nuclei",
    "write_image",
]
