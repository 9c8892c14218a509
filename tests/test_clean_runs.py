"""Running the notebooks leaves the checkout as it was.

* **papermill, from any working directory**: a notebook's relative folders (``output_dir``,
  ``cache_dir``) are read against its own folder, never the working directory; the session's small
  report runs every notebook with the kernel in another folder, and ``git status`` of the checkout
  is the same before and after (``conftest.small_report`` records both).
* **JupyterLab**: every notebook, with the outputs and run-time metadata its run left (taken from
  the small report's executed copy, the way JupyterLab's model holds them), is saved through
  jupytext's contents manager (JupyterLab's, with the pairing of ``pyproject.toml``), in a
  clone-like git repository with the set-up's clean filter (``scripts/install_git_filters.sh``):
  the files on disk keep their outputs, ``git diff HEAD`` is empty and, once the saved notebooks are
  added (their new sizes recorded, nothing staged), so is ``git status``.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from workbench.present import notebook_params
from workbench.present.report import NOTEBOOKS_DIR

ROOT = Path(__file__).resolve().parents[1]


def test_relative_folders_are_read_against_the_notebooks_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # papermill's kernel runs wherever it was started
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    target = tmp_path / "elsewhere" / "out"
    relative = Path(*[".."] * len(NOTEBOOKS_DIR.parts[1:])) / target.relative_to("/")  # from notebooks/ to target
    assert notebook_params.check_output_dir(str(relative)) == target.resolve() and (target / "figures").is_dir()
    assert notebook_params.check_cache_dir("../data/cache") == NOTEBOOKS_DIR.parent / "data" / "cache"
    assert not (tmp_path / "figures").exists()
    # In JupyterLab the kernel knows its notebook: relative folders follow the notebook's copy.
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    (copy_dir / "00_overview.ipynb").write_text("{}")
    monkeypatch.setenv("JPY_SESSION_NAME", str(copy_dir / "00_overview.ipynb"))
    assert notebook_params.check_output_dir("../reports") == (tmp_path / "reports").resolve()
    assert notebook_params.check_cache_dir(None) is None


def test_running_every_notebook_leaves_git_status_as_it_was(small_report: tuple[Path, list[Any], str]) -> None:
    out, runs, log = small_report
    assert runs and all(run.error is None for run in runs), log
    status = json.loads((out / "git-status.json").read_text())
    if status["before"] is None:
        pytest.skip("not a git clone: no git status to compare")
    assert status["after"] == status["before"]


def _as_jupyterlab_holds_it(committed: Any, executed: Any) -> Any:
    """The committed notebook as JupyterLab's model holds it after a run: the run's outputs and
    execution counts in every code cell, the kernel's language_info, widget state, cell timings."""
    ran = {cell.get("id"): cell for cell in executed.cells}
    model = copy.deepcopy(committed)
    for cell in model.cells:
        if cell.cell_type == "code" and cell.get("id") in ran:
            cell.outputs = ran[cell.id].outputs
            cell.execution_count = ran[cell.id].execution_count
            cell.metadata["execution"] = {"iopub.status.busy": "2026-12-01T10:00:00.000Z"}
            cell.metadata["scrolled"] = True
    model.metadata["language_info"] = executed.metadata.get("language_info", {"name": "python", "version": "3.11.2"})
    model.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    model.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    return model


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def test_a_jupyterlab_save_of_every_notebook_leaves_git_status_clean(small_report: tuple[Path, list[Any], str],
                                                                       tmp_path: Path) -> None:
    jupytext = pytest.importorskip("jupytext", reason="jupytext is in the notebook extra")

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    out, runs, log = small_report
    repo = tmp_path / "clone"
    (repo / "scripts").mkdir(parents=True)
    shutil.copytree(NOTEBOOKS_DIR, repo / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    for name in ("pyproject.toml", ".gitattributes", ".gitignore", "scripts/nbstrip.py", "scripts/install_git_filters.sh"):
        shutil.copy(ROOT / name, repo / name)
    _git(repo, "init", "-q")
    subprocess.run(["bash", "scripts/install_git_filters.sh", sys.executable], cwd=repo, check=True)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone")
    assert _git(repo, "status", "--porcelain") == ""

    manager = jupytext.TextFileContentsManager(root_dir=str(repo))
    for run in runs:
        committed = nbformat.read(str(repo / "notebooks" / f"{run.name}.ipynb"), as_version=4)
        model = _as_jupyterlab_holds_it(committed, nbformat.read(str(run.executed), as_version=4))
        assert any(cell.get("outputs") for cell in model.cells), f"{run.name}: the run left no outputs to save"
        manager.save({"type": "notebook", "format": "json", "content": model}, f"notebooks/{run.name}.ipynb")
        saved = json.loads((repo / "notebooks" / f"{run.name}.ipynb").read_text())
        assert any(cell.get("outputs") for cell in saved["cells"]), f"{run.name}: saved without its outputs"
    assert _git(repo, "diff", "HEAD") == ""
    # git status lists a notebook whose file size changed (stat-only, content not compared) until it is
    # added, which stages nothing (tests/test_notebook_outputs_kept.py)
    _git(repo, "add", "notebooks")
    assert _git(repo, "status", "--porcelain") == ""
