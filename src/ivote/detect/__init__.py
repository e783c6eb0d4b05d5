"""Nucleus detection by iterative voting, on the GPU (CuPy) or NumPy."""

from ._colour import hematoxylin_density
from ._voting import Detections, iterative_voting, otsu_threshold

__all__ = ["Detections", "hematoxylin_density", "iterative_voting", "otsu_threshold"]
