"""Nucleus detection by iterative voting, on the GPU (CuPy) or NumPy."""

from ._colour import hematoxylin_density, stain_vectors
from ._radius import estimate_radius, typical_radius
from ._dispatch import iterative_voting
from ._memory import detection_memory, largest_radius
from ._detections import Detections
from ._thresholds import auto_threshold, otsu_threshold, reference_threshold

__all__ = ["Detections", "auto_threshold", "detection_memory", "estimate_radius", "hematoxylin_density", "iterative_voting", "largest_radius", "otsu_threshold", "reference_threshold", "stain_vectors",
           "typical_radius"]
