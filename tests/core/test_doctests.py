"""Run the Examples sections of the core's docstrings."""

import doctest
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ivote"
MODULES = sorted(
    "ivote." + ".".join(p.relative_to(SRC).with_suffix("").parts)
    for p in SRC.rglob("*.py")
    if "napari" not in p.relative_to(SRC).parts and p.name != "__init__.py" and not p.name.startswith("_cuda")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest failure(s) in {name}"
