"""Sample data: synthetic nuclei with known truth."""

from ._synthetic import SyntheticNuclei, synthetic_nuclei

__all__ = ["SyntheticNuclei", "sample_2d", "sample_3d", "synthetic_nuclei"]


def sample_2d(shape=(512, 512)) -> SyntheticNuclei:
    """A fluorescence-like tile (default 512²) at 0.5 µm/px with nuclei up to 6 µm in radius."""
    return synthetic_nuclei(shape, spacing=(0.5, 0.5), radius=6.0, overlap=0.25, noise=0.05, seed=2018)


def sample_3d(shape=(48, 160, 160)) -> SyntheticNuclei:
    """An anisotropic confocal-like volume (default 48x160x160) at (2.0, 0.5, 0.5) µm, nuclei up to 5 µm."""
    return synthetic_nuclei(shape, spacing=(2.0, 0.5, 0.5), radius=5.0, overlap=0.2, noise=0.05, seed=2015)
