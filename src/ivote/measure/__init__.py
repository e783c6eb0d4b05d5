"""Per-nucleus measurements of a label image in physical units (scikit-image's
``regionprops_table`` with ``spacing``), their CSV export, and nuclei per annotated region."""

from ._measure import measure_nuclei, write_table_csv
from ._regions import count_in_regions, region_of_points

__all__ = ["count_in_regions", "measure_nuclei", "region_of_points", "write_table_csv"]
