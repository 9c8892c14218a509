"""Every notebook is a jupytext pair: ``notebooks/NN_name.py`` (py:percent) beside ``NN_name.ipynb``.

The ``.py`` file is the source that review reads and ruff checks (``tests/test_static_checks.py``);
the ``.ipynb`` is what papermill and the report run. JupyterLab saves both; from a shell,
``.venv/bin/jupytext --sync notebooks/*.py`` updates whichever is older. A pair whose cells,
cell tags or ``workbench`` metadata differ fails here, naming the first cell that differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from workbench.present.report import NOTEBOOKS_DIR

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the notebook extra (pip install -e '.[notebooks]')")

SOURCES = sorted(NOTEBOOKS_DIR.glob("*.py"))
SYNC = ".venv/bin/jupytext --sync notebooks/*.py"


def _cells(notebook: Any) -> list[tuple[str, str, list[str]]]:
    return [(cell.cell_type, cell.source.strip(), sorted(cell.metadata.get("tags", []))) for cell in notebook.cells]


def test_every_notebook_has_its_py_percent_source() -> None:
    notebooks = {path.stem for path in NOTEBOOKS_DIR.glob("*.ipynb")}
    assert notebooks, "no notebooks found"
    assert {path.stem for path in SOURCES} == notebooks
    for source in SOURCES:
        header = source.read_text().split("# ---", 2)[1]
        assert "format_name: percent" in header, f"{source.name} is not a py:percent notebook"


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_pair_is_in_sync(source: Path) -> None:
    text = jupytext.read(str(source))
    notebook = nbformat.read(str(source.with_suffix(".ipynb")), as_version=4)
    for index, (from_text, from_ipynb) in enumerate(zip(_cells(text), _cells(notebook))):
        assert from_text == from_ipynb, f"{source.name}: cell {index} differs from the .ipynb; run `{SYNC}`"
    assert len(text.cells) == len(notebook.cells), f"{source.name}: cell counts differ; run `{SYNC}`"
    assert text.metadata.get("workbench") == notebook.metadata.get("workbench"), f"{source.name}: metadata differs"
    assert notebook.metadata["workbench"]["test_parameters"], f"{source.name} declares no test_parameters"


def test_an_edit_on_one_side_is_caught(tmp_path: Path) -> None:
    """The check above can fail: change one line of a copy of a source and compare again."""
    source = SOURCES[0]
    edited = tmp_path / source.name
    edited.write_text(source.read_text().replace("# %% [markdown]\n# #", "# %% [markdown]\n# # edited:", 1))
    notebook = nbformat.read(str(source.with_suffix(".ipynb")), as_version=4)
    assert _cells(jupytext.read(str(edited))) != _cells(notebook)
