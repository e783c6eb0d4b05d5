"""One place names a layer's unit (ivote.napari._units): files and tables, widget labels, the OME writer."""

import numpy as np
import pytest

from ivote.napari._units import is_micrometre, unit_label, unit_name

MICROMETRE = ["um", "µm", "μm", "micrometer", "micrometre", "micron", "microns"]


@pytest.mark.parametrize("spelling", MICROMETRE)
def test_every_micrometre_spelling_is_one_unit(spelling):
    assert unit_name(spelling) == "um" and is_micrometre((spelling, spelling))
    assert unit_label((spelling,) * 2) == "µm" and unit_label(("pixel",) * 2, {"units": spelling}) == "µm"


@pytest.mark.parametrize("units", [None, (), ("pixel", "pixel"), "px", ("pixels",), "world units", ""])
def test_pixels_and_no_unit_have_no_name(units):
    assert unit_name(units) is None and not is_micrometre(units)
    assert unit_label(units, None, (1.0, 1.0)) == "px"
    assert unit_label(units, None, (0.5, 0.5)) == "world units"


def test_other_units_keep_their_name_and_the_last_axis_counts():
    assert unit_name(("second", "nanometer", "nanometer")) == "nm" and unit_label(("nanometer",) * 2) == "nm"
    assert unit_name(np.array(["millimetre", "millimetre"], dtype=object)) == "mm"
    assert unit_name(("pixel", "inch")) == "inch" and unit_label(("inch",)) == "inch"
    assert unit_label(("micrometer",) * 2, {"units": "nm"}) == "µm"  # the layer's own units first


def test_the_csv_writer_and_the_widgets_read_units_alike(tmp_path):
    """napari's 'micrometer' goes to a points CSV as 'um' and back; the Detect geometry labels it 'µm'."""
    from ivote.io import read_points_csv
    from ivote.napari._detect_logic import image_geometry
    from ivote.napari._io import write_points

    attributes = {"scale": (0.5, 0.5), "units": ("micrometer", "micrometer"), "features": {"score": [1.0, 2.0]},
                  "metadata": {"radius": 3.0}}
    path = write_points(str(tmp_path / "p.csv"), np.array([[1.0, 2.0], [3.0, 4.0]]), attributes)[0]
    assert read_points_csv(path).units == "um"
    assert image_geometry((10, 10), scale=(0.5, 0.5), units=attributes["units"]).unit == "µm"
