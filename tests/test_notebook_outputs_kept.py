"""A notebook saved with its outputs keeps them on disk while git sees it as committed (issue 42).

End to end, in a fresh clone of this checkout's committed HEAD: the set-up's filter registration
(``scripts/install_git_filters.sh``, what ``make setup`` runs), then every notebook saved the way
JupyterLab saves it (jupytext's contents manager, which also writes the paired ``.py``) with
outputs, execution counts and run-time metadata added, its numbers as JavaScript holds them. The
outputs stay in the files and ``git diff`` (against the index and HEAD) shows nothing. ``git status``
lists a saved notebook whose file size changed until it is added (a stat-only entry: git compares
sizes before content); adding it stages nothing and leaves ``git status`` empty. No notebook is
executed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbstrip_filter import load as load_nbstrip

ROOT = Path(__file__).resolve().parents[1]
NBSTRIP = load_nbstrip()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def as_javascript_holds_it(value: Any) -> Any:
    """``value`` after JSON.parse and JSON.stringify in JupyterLab's page: one number type, so an
    integral float comes back an int (``0.0`` is saved as ``0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: as_javascript_holds_it(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_javascript_holds_it(v) for v in value]
    return value


def with_a_run(notebook: Any, number: int) -> Any:
    """``notebook`` as JupyterLab's model holds it after a run: outputs, counts, run-time metadata."""
    for count, cell in enumerate(cell for cell in notebook.cells if cell.cell_type == "code"):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {number}.{count}\n"),
                        nbformat.v4.new_output("display_data", data={"text/plain": "é ≤ 0.0"})]
        cell.execution_count = count + 1
        cell.metadata["execution"] = {"iopub.status.busy": "2026-12-01T10:00:00.000Z"}
    notebook.metadata["language_info"] = {"name": "python", "version": "3.11.2"}
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nbformat.from_dict(as_javascript_holds_it(notebook))


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git clone: nothing to clone")
    head = _git(ROOT, "rev-parse", "HEAD").strip()
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(clone)], check=True)
    _git(clone, "checkout", "-q", head)
    subprocess.run(["bash", "scripts/install_git_filters.sh", sys.executable], cwd=clone, check=True)
    return clone


def test_a_fresh_clone_with_the_filter_is_clean(fresh_clone: Path) -> None:
    assert _git(fresh_clone, "config", "filter.workbench-nbstrip.required") == "true\n"
    assert _git(fresh_clone, "status", "--porcelain") == ""
    # every committed notebook is already what the filter makes of it, so nothing is renormalized
    for path in sorted((fresh_clone / "notebooks").glob("*.ipynb")):
        assert NBSTRIP.clean(path.read_bytes()) == path.read_bytes(), path.name


def test_a_jupyterlab_save_with_outputs_keeps_them_and_leaves_git_clean(fresh_clone: Path) -> None:
    jupytext = pytest.importorskip("jupytext", reason="jupytext is in the notebook extra")
    manager = jupytext.TextFileContentsManager(root_dir=str(fresh_clone))  # pairing: pyproject.toml
    paths = sorted((fresh_clone / "notebooks").glob("*.ipynb"))
    assert len(paths) >= 7
    for number, path in enumerate(paths):
        model = manager.get(f"notebooks/{path.name}", content=True)
        manager.save({"type": "notebook", "format": "json", "content": with_a_run(model["content"], number)},
                     f"notebooks/{path.name}")
        saved = json.loads(path.read_text(encoding="utf-8"))
        kept = [o for cell in saved["cells"] for o in cell.get("outputs", [])]
        assert any(o.get("text") == [f"ran {number}.0\n"] for o in kept), f"{path.name}: outputs not kept on disk"
        assert "language_info" in saved["metadata"]
    names = [f"notebooks/{p.name}" for p in paths]
    # Content, through the filter: nothing changed, against the index and against HEAD.
    assert _git(fresh_clone, "diff") == "" and _git(fresh_clone, "diff", "HEAD") == ""
    # The check can fail: without the filter, git sees every saved notebook's content changed.
    unfiltered = _git(fresh_clone, "-c", "filter.workbench-nbstrip.clean=cat", "diff", "--name-only")
    assert sorted(unfiltered.split()) == names
    # git status trusts a file size that differs from the one its index recorded and lists the
    # notebook without comparing content (git's read-cache.c, ie_modified): a stat-only entry. Adding
    # the notebooks records their new size and stages nothing (the filter gives the committed blob).
    stat_only = _git(fresh_clone, "status", "--porcelain").splitlines()
    assert all(line.startswith(" M notebooks/") and line[3:] in names for line in stat_only), stat_only
    _git(fresh_clone, "add", "notebooks")
    assert _git(fresh_clone, "status", "--porcelain") == ""
    assert _git(fresh_clone, "diff", "--cached") == ""
    assert all("outputs" in p.read_text() and '"ran ' in p.read_text() for p in paths)  # still on disk


def test_the_filter_keeps_numbers_and_lays_out_as_nbformat_writes() -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["workbench"] = {"test_parameters": {"rates": [0.0, 1.0, 0.5], "runs": 3}}
    notebook.metadata["kernelspec"] = {"display_name": "Python 3 (venv)", "language": "python", "name": "python3"}
    notebook.cells = [nbformat.v4.new_code_cell("x = 1\ny = 'é'\n", execution_count=4,
                                                outputs=[nbformat.v4.new_output("stream", text="1\n")]),
                      nbformat.v4.new_markdown_cell("# title\ntext")]
    bare = nbformat.from_dict(json.loads(json.dumps(notebook)))
    for cell in bare.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    bare.metadata["kernelspec"]["display_name"] = "Python 3 (ipykernel)"
    expected = nbformat.writes(bare) + "\n"  # what nbformat.write puts in a file
    assert NBSTRIP.clean(nbformat.writes(notebook).encode()) == expected.encode("utf-8")
    assert '"rates": [\n     0.0,\n     1.0,\n     0.5\n    ]' in expected
    # a writer that stores a source as one string is laid out as nbformat lays it out
    one_string = json.loads(nbformat.writes(notebook))
    for cell in one_string["cells"]:
        cell["source"] = "".join(cell["source"])
    assert NBSTRIP.clean(json.dumps(one_string).encode()) == expected.encode("utf-8")
    assert NBSTRIP.clean(b'{"cells": [') == b'{"cells": ['  # half-written: passed through


def test_no_notebook_metadata_holds_a_number_javascript_would_rewrite() -> None:
    """JupyterLab's save writes an integral float back as an int, in the .ipynb and in the paired
    .py's header alike, where no filter can restore it: the notebooks hold none."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        metadata = json.loads(path.read_text(encoding="utf-8"))["metadata"]
        assert as_javascript_holds_it(metadata) == metadata, path.name
