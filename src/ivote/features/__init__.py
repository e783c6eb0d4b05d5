"""Learned features: a convolutional RBM trained in the frequency domain, 2D and 3D, strided."""

from ._convrbm import ConvRBM
from ._learn import LearnedFeatures, NucleusFeatures, learn_features, nucleus_filter_shape
from ._space_to_depth import depth_to_space, fft_size, space_to_depth

__all__ = ["ConvRBM", "LearnedFeatures", "NucleusFeatures", "depth_to_space", "fft_size", "learn_features",
           "nucleus_filter_shape", "space_to_depth"]
