"""docs/layout.md's tree is the tree: generated from the modules' own docstrings
(``scripts/layout_doc.py``), so a module moved, added or removed without the page shows here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> object:
    spec = importlib.util.spec_from_file_location("layout_doc", ROOT / "scripts" / "layout_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_holds_the_generated_tree() -> None:
    block = _generator().block()  # type: ignore[attr-defined]
    page = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    assert block in page, "docs/layout.md differs from the tree: .venv/bin/python scripts/layout_doc.py --write puts it there"


def test_every_module_of_the_package_is_on_it() -> None:
    """An independent walk of the files: each module's name appears in the block, at its depth."""
    block = _generator().block()  # type: ignore[attr-defined]
    lines = block.splitlines()
    for path in (ROOT / "workbench").rglob("*.py"):
        if path.name in ("__init__.py", "__main__.py") or "__pycache__" in path.parts:
            continue
        depth = len(path.relative_to(ROOT / "workbench").parts)  # 1: directly in workbench/
        assert any(line.startswith("  " * depth + path.name + " ") for line in lines), path
