"""Print the code's layout as docs/layout.md shows it: every package of ``workbench/`` with the first
line of what its ``__init__`` says it holds, and every module with the first line of its docstring.

    python scripts/layout_doc.py            print the tree
    python scripts/layout_doc.py --write    put it in docs/layout.md, in place of the tree there
                                            (tests/test_layout_doc.py compares the two)

Generated from the modules' own docstrings, so the page cannot drift from the tree: a module moved,
added or removed changes the page the next time it is generated, and the test says so until then.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"
WIDTH = 34  # the names' column


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _short(text: str, limit: int = 110) -> str:
    sentence = text.split(". ")[0].rstrip(".")
    return sentence if len(sentence) <= limit else sentence[: limit - 3].rstrip() + "..."


def layout(folder: Path = PACKAGE, depth: int = 0) -> list[str]:
    lines = []
    indent = "  " * depth
    modules = sorted(p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    for module in modules:
        lines.append(f"{indent}{module.name:<{WIDTH - len(indent)}}{_short(first_line(module))}")
    for package in sorted(p for p in folder.iterdir() if (p / "__init__.py").exists()):
        lines.append(f"{indent}{package.name + '/':<{WIDTH - len(indent)}}{_short(first_line(package / '__init__.py'))}")
        lines += layout(package, depth + 1)
    return lines


def block() -> str:
    return "```\nworkbench/\n" + "\n".join("  " + line for line in layout()) + "\n```\n"


def write(page: Path = ROOT / "docs" / "layout.md") -> None:
    """Replace the page's tree (the code block that starts with ``workbench/``) with the current one."""
    text = page.read_text(encoding="utf-8")
    start = text.index("```\nworkbench/\n")
    end = text.index("```\n", start + 4) + 4
    page.write_text(text[:start] + block() + text[end:], encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        sys.stdout.write(block())
