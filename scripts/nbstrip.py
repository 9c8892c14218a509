"""Notebooks as they are committed, whatever a run left in them: a JupyterLab save hook and a git filter.

Two guards, one rule (``strip``):

* **JupyterLab** (``pre_save_hook``, set by ``scripts/jupyter_server_config.py``, which
  ``scripts/setup.sh`` links into ``.venv/etc/jupyter/``): a workbench notebook (one whose metadata
  has a ``workbench`` section) is written to disk in its committed form, outputs and all run-time
  metadata left out, so running it and autosaving leave ``git status`` clean. The outputs stay on
  the page until it is reloaded; the executed copies with outputs are the report's
  (``make report``), under ``reports/notebooks/``.
* **git** (a clean filter, ``.gitattributes``; ``scripts/install_git_filters.sh``, run by the
  set-up, registers it): a notebook that got outputs another way (papermill in place, another
  editor) is committed, and diffed, without them.

What a run adds and ``strip`` drops: every code cell's outputs and execution count; papermill's
injected-parameters cell; cell metadata other than non-empty ``tags`` and jupytext's
``lines_to_next_cell`` (JupyterLab's ``execution`` timings, ``scrolled``, ``collapsed``,
papermill's own); notebook metadata other than ``jupytext``, ``kernelspec`` and ``workbench``
(``language_info``, which names the Python that ran it, ``widgets``, ``papermill``); the kernel's
display name, which differs between installations, is the python3 kernel's. The JSON is written as
nbformat writes it (one-space indent, sorted keys). Standard library only: the filter runs with any
Python, and the JupyterLab server does not import workbench (nor torch) for it.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

CELL_METADATA = ("tags", "lines_to_next_cell")
NOTEBOOK_METADATA = ("jupytext", "kernelspec", "workbench")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
PAPERMILL_TAGS = ("injected-parameters",)


def strip(notebook: dict[str, Any]) -> dict[str, Any]:
    """The committed form of ``notebook`` (a new dict; the argument is not changed)."""
    cells = []
    for cell in notebook.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        if any(tag in PAPERMILL_TAGS for tag in tags):
            continue  # papermill's injected parameters: a run's, not the notebook's
        kept = {k: copy.deepcopy(v) for k, v in cell.items() if k not in ("outputs", "execution_count", "metadata")}
        # an empty tag list (papermill adds one to every cell) is no tag at all
        kept["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k in CELL_METADATA and v != []}
        if cell.get("cell_type") == "code":
            kept["outputs"], kept["execution_count"] = [], None
        cells.append(kept)
    metadata = {k: copy.deepcopy(v) for k, v in notebook.get("metadata", {}).items() if k in NOTEBOOK_METADATA}
    if "kernelspec" in metadata and metadata["kernelspec"].get("name") == KERNELSPEC["name"]:
        metadata["kernelspec"] = dict(KERNELSPEC)
    representation = metadata.get("jupytext", {}).get("text_representation", {})
    representation.pop("jupytext_version", None)  # the jupytext that last wrote it
    return {**notebook, "cells": cells, "metadata": metadata}


def pre_save_hook(model: dict[str, Any], **_: Any) -> None:
    """``ContentsManager.pre_save_hook``: a workbench notebook is saved in its committed form."""
    content = model.get("content")
    if model.get("type") == "notebook" and isinstance(content, dict) and "workbench" in content.get("metadata", {}):
        model["content"] = strip(content)


def dumps(notebook: dict[str, Any]) -> str:
    """As ``nbformat.writes`` lays a notebook out."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    data = sys.stdin.buffer.read()
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        sys.stdout.buffer.write(data)  # not a notebook (a half-written file): passed through, never lost
        return
    sys.stdout.buffer.write(dumps(strip(notebook)).encode("utf-8"))


if __name__ == "__main__":
    main()
