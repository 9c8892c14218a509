"""The notebooks' git clean filter (``scripts/nbstrip.py``, a script, not a package module) loaded
for the tests that call it in-process."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "nbstrip.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nbstrip", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
