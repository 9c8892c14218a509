"""The package's import graph has no circle, and no package folder holds more than 20 modules.

The graph is computed from the source, not by importing it: every module under ``workbench/``
(a package is its ``__init__.py``), and an arrow for every ``import`` / ``from ... import`` anywhere
in a module: at the top, inside a function (a lazy import that hides a circle is still one),
under ``if TYPE_CHECKING:`` too (a type-only circle is still two modules that each need the other
to be read; none is excluded). ``from pkg import name`` is an arrow to ``pkg.name`` when that is a
module of the package, else to ``pkg``; an import of a module outside the package (torch, an
engine) is no arrow. Importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first; that is
Python's machinery, not a dependency a module states, and is not an arrow (the package
``__init__`` files hold no code that imports their own submodules back, except the backend
registry, which only its callers import).

A circle fails naming its modules in order (``a -> b -> a``); a crowded folder fails naming the
folder and its count (modules directly in it, ``__init__.py`` not counted, sub-packages not).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
MOST_MODULES = 20


def modules_of(package: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package rooted at ``package``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: from its own package (a module's) or itself (a package's), up level - 1
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # ``from P import m`` runs P's __init__ before m: an arrow to both (a registry package that imports
    # its members is a circle with a member that imports a sibling this way)
    return [t for alias in node.names for t in ((f"{source}.{alias.name}", source)
                                                if f"{source}.{alias.name}" in modules else (source,))]


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, wherever in it the import statement is."""
    modules = modules_of(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(name, path.name == "__init__.py", node, modules):
                while target and target not in modules:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def strong_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit), those of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def one_circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest circle through the component's first module, as the modules in order, first repeated."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in sorted(graph[node] & members):
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    raise AssertionError(f"no circle through {start} in {component}")  # a component always has one


def crowded_folders(package: Path, most: int = MOST_MODULES) -> dict[str, int]:
    """Package folders holding more than ``most`` modules directly: folder -> how many."""
    counts = {}
    for init in sorted(package.rglob("__init__.py")):
        folder = init.parent
        count = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
        if count > most:
            counts[str(folder.relative_to(package.parent))] = count
    return counts


def circles_described(package: Path) -> list[str]:
    graph = import_graph(package)
    return [f"{len(c)} modules: " + " -> ".join(one_circle(graph, c)) for c in strong_components(graph)]


# ---- the package -----------------------------------------------------------------------------


def test_the_package_has_no_import_circle() -> None:
    circles = circles_described(PACKAGE)
    assert not circles, "import circles in workbench/ (function-level imports count):\n" + "\n".join(circles)


def test_no_package_folder_holds_more_than_20_modules() -> None:
    crowded = crowded_folders(PACKAGE)
    assert not crowded, f"package folders with more than {MOST_MODULES} modules directly: {crowded}"


def test_every_package_says_what_it_holds_and_who_imports_it() -> None:
    """Each ``__init__`` docstring is more than the package's name and names who imports it."""
    vague = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if len(doc.split()) < 8 or "import" not in doc.lower():
            vague.append(str(init.relative_to(PACKAGE.parent)))
    assert not vague, f"package docstrings that do not say what they hold and who imports them: {vague}"


# ---- the checks themselves, on small packages written for them -----------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_circle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.c import g\n    return g\n",
        "c.py": "import pkg.a\ndef g(): pass\n",
        "d.py": "from pkg import a\n",  # into the circle, not on it
    })
    assert circles_described(package) == ["3 modules: pkg.a -> pkg.b -> pkg.c -> pkg.a"]


@pytest.mark.parametrize("b_text", [
    "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
    "from . import a\n",  # relative
    "from .a import A\n",
])
def test_a_two_module_circle_in_every_spelling_is_found(tmp_path: Path, b_text: str) -> None:
    package = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg.b import B\nclass A: pass\n",
                                  "b.py": b_text + "class B: pass\n"})
    assert circles_described(package) == ["2 modules: pkg.a -> pkg.b -> pkg.a"]


def test_one_way_arrows_and_outside_imports_are_no_circle(tmp_path: Path) -> None:
    package = _package(tmp_path, {"__init__.py": "import os\n", "a.py": "import torch\nfrom pkg import b\n",
                                  "b.py": "from pkg.sub import c\n", "sub/__init__.py": "", "sub/c.py": "import json\n"})
    graph = import_graph(package)  # ``from P import m``: P's __init__ runs first, an arrow to it too
    assert graph["pkg.b"] == {"pkg.sub", "pkg.sub.c"} and graph["pkg.sub.c"] == set()
    assert "pkg.b" in graph["pkg.a"] and graph["pkg"] == set()
    assert circles_described(package) == []


def test_a_registry_package_and_a_member_importing_a_sibling_through_it_is_a_circle(tmp_path: Path) -> None:
    package = _package(tmp_path, {"__init__.py": "from pkg import a\n", "a.py": "from pkg import b\n", "b.py": ""})
    assert circles_described(package) == ["2 modules: pkg -> pkg.a -> pkg"]


def test_a_folder_of_21_modules_is_crowded_and_20_is_not(tmp_path: Path) -> None:
    files = {"__init__.py": "", "full/__init__.py": "", "over/__init__.py": ""}
    files |= {f"full/m{i}.py": "" for i in range(20)} | {f"over/m{i}.py": "" for i in range(21)}
    assert crowded_folders(_package(tmp_path, files)) == {"pkg/over": 21}
