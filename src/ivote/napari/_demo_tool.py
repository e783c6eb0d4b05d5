"""The napari step of ``ivote demo``: the screenshot tool of the source tree (``tools/demo_screenshot.py``), run
when the package is used from a checkout; elsewhere the step says it is skipped. Imports no napari."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["TOOL", "load_tool", "start_screenshot_demo"]

TOOL = Path(__file__).resolve().parents[3] / "tools" / "demo_screenshot.py"
_MODULE = "ivote_tools_demo_screenshot"


def load_tool():
    """The tool's module (loaded once), or None when this installation has no source tree beside it."""
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    if not TOOL.is_file():
        return None
    spec = importlib.util.spec_from_file_location(_MODULE, TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    spec.loader.exec_module(module)
    return module


class _Skipped:
    def __init__(self, line: str):
        self._lines = [line]

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None

    def result(self) -> list[str]:
        return self._lines


def start_screenshot_demo(sample_2d, out_dir):
    """``tools/demo_screenshot.py``'s :func:`start_screenshot_demo`, or a skipped step without the source tree."""
    tool = load_tool()
    if tool is None:
        return _Skipped("napari screenshot: skipped (tools/demo_screenshot.py comes with the source repository)")
    return tool.start_screenshot_demo(sample_2d, out_dir)
