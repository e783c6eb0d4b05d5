"""Detection that learns from a few corrections.

The user corrects the points of one image (deletes false detections, adds
missed nuclei); :func:`learn_detector` learns from the features of every
candidate of the vote field (:func:`candidate_features`) which are nuclei,
and the resulting :class:`LearnedDetector` scores the candidates of every
other image by that probability (``iterative_voting(..., detector=...)``).
"""

from ._detector import LearnedDetector, load_detector
from ._features import CandidateFeatures, candidate_features, feature_names
from ._learn import Corrections, choose_threshold, corrections_of, fit_detector, learn_detector

__all__ = ["CandidateFeatures", "Corrections", "LearnedDetector", "candidate_features", "choose_threshold",
           "corrections_of", "feature_names", "fit_detector", "learn_detector", "load_detector"]
