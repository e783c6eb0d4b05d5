"""The layering rules: the core never imports napari, Qt or magicgui; only
_backend imports CuPy; the manifest is valid and packaged."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ivote"
GUI = ("napari", "qtpy", "magicgui", "PyQt5", "PyQt6", "PySide2", "PySide6", "superqt", "vispy")


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def _core_files():
    return [p for p in SRC.rglob("*.py") if "napari" not in p.relative_to(SRC).parts]


def test_core_source_imports_no_gui():
    offenders = {str(p.relative_to(SRC)): m for p in _core_files() for m in _imports(p) if m in GUI}
    assert not offenders, f"core modules import GUI packages: {offenders}"


def test_only_backend_imports_cupy():
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if p.name != "_backend.py" and any(m in ("cupy", "cupyx") for m in _imports(p))
    ]
    assert not offenders, f"only ivote/_backend.py may import CuPy: {offenders}"


def test_importing_the_core_loads_no_gui():
    modules = sorted(
        "ivote." + ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        for p in _core_files()
        if p.name != "__main__.py"
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m.removesuffix('.'))\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {GUI!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing the core pulled in: {out.stdout.strip()}"


def test_manifest_is_valid_and_packaged():
    npe2 = pytest.importorskip("npe2")
    from importlib import resources

    packaged = resources.files("ivote") / "napari.yaml"
    assert packaged.is_file()
    top = SRC.parents[1] / "napari.yaml"
    assert top.read_text() == packaged.read_text()
    manifest = npe2.PluginManifest.from_file(str(packaged))
    assert manifest.name == "napari-ivote"
    result = subprocess.run(
        [sys.executable, "-m", "npe2", "validate", str(packaged)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # every python_name resolves to a callable
    for command in manifest.contributions.commands or []:
        if command.python_name:
            module, _, attr = command.python_name.partition(":")
            mod = __import__(module, fromlist=[attr])
            assert callable(getattr(mod, attr)), command.python_name
