"""Papermill's own parameter inference (``papermill --help-notebook``, ``papermill.inspect_notebook``)
reads every parameter of every notebook, with its type and its help.

Papermill parses a parameters cell line by line with a regular expression: a line with two ``=``
(a help text saying ``N >= 0``) is skipped with "Unable to parse line", and an annotation it cannot
read (``str | None``) drops the parameter silently. The expected parameters come from Python's own
parser (``ast``) over the same cell, so a parameter papermill misses or misreads fails here.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import nbformat
import pytest

from workbench.present.report import notebook_paths

papermill = pytest.importorskip("papermill", reason="papermill is in the notebook extra")

NOTEBOOKS = notebook_paths()


def assignments(source: str) -> dict[str, ast.expr]:
    """Every top-level name the cell assigns, with its value, as Python reads it."""
    found: dict[str, ast.expr] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                assert isinstance(target, ast.Name), f"a parameter is assigned to a name: {ast.unparse(target)}"
                found[target.id] = node.value
    return found


def parameters_cell(path: Path) -> str:
    notebook = nbformat.read(str(path), as_version=4)
    cells = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: {len(cells)} cells tagged parameters"
    return str(cells[0].source)


def test_every_notebook_is_inspected() -> None:
    assert len(NOTEBOOKS) == len(list(NOTEBOOKS[0].parent.glob("*.ipynb"))) >= 7


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_infers_every_parameter_with_its_type_and_help(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    expected = assignments(parameters_cell(path))
    with caplog.at_level(logging.WARNING, logger="papermill"):
        inferred = papermill.inspect_notebook(str(path))
    unparsed = [r.getMessage() for r in caplog.records if r.name.startswith("papermill")]
    assert not unparsed, f"{path.name}: {unparsed}"
    assert list(inferred) == list(expected), f"{path.name}: papermill infers {list(inferred)}"
    for name, value in expected.items():
        p = inferred[name]
        assert p["inferred_type_name"] not in ("", "None"), f"{path.name}: {name} has no type papermill reads"
        assert p["help"], f"{path.name}: {name} has no help"
        # papermill's default is the text it read; it must be the value Python assigns
        assert ast.literal_eval(p["default"]) == ast.literal_eval(value), f"{path.name}: {name}: {p['default']}"


def test_a_help_with_a_second_equals_sign_is_what_papermill_cannot_parse(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The check above can fail: the line issue 42 quotes, as it was, is skipped by papermill."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    notebook.cells = [nbformat.v4.new_code_cell(
        'device: str = "cpu"  # where it runs\novershoot = -1  # -1: the reach; N >= 0: a what-if',
        metadata={"tags": ["parameters"]})]
    path = tmp_path / "old.ipynb"
    nbformat.write(notebook, str(path))
    with caplog.at_level(logging.WARNING, logger="papermill"):
        inferred = papermill.inspect_notebook(str(path))
    assert list(inferred) == ["device"] and list(assignments(parameters_cell(path))) == ["device", "overshoot"]
    assert any("Unable to parse line 2" in r.getMessage() for r in caplog.records)
