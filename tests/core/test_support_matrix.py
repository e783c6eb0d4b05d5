"""The support matrix: Qt and napari are never core dependencies, and the versions CI tests are the ones
pyproject.toml declares and docs/installation.md states."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_core_install_pulls_in_no_qt_and_no_napari():
    gui = re.compile(r"^(pyqt|pyside|qtpy|napari|magicgui|superqt|vispy|cupy)", re.IGNORECASE)
    core = [d for d in _project()["dependencies"] if gui.match(d.strip())]
    assert core == [], f"GUI or CUDA packages among the core dependencies: {core}"
    assert not any(gui.match(d) and d.lower().startswith(("pyqt", "pyside")) for d in _project()
                   ["optional-dependencies"]["napari"]), "the napari extra must leave the Qt binding to the user"


def test_installation_page_states_the_declared_floors():
    project = _project()
    python_floor = re.search(r">=\s*([0-9.]+)", project["requires-python"]).group(1)
    napari = next(d for d in project["optional-dependencies"]["napari"] if d.startswith("napari"))
    napari_floor = re.search(r">=\s*([0-9.]+)", napari).group(1)
    assert any(d.startswith("napari-ivote[napari") and ";" not in d for d in project["optional-dependencies"]["test"]), \
        "the test extra installs napari on every Python declared"
    page = (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
    assert f"Python >= {python_floor}" in page
    assert f"| {python_floor} | {napari_floor} |" in page, "the matrix must test the widgets on the declared floors"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "requires-python" in ci and '"napari>=' in ci  # CI reads the floors from pyproject.toml
