"""The notebooks' git clean filter: git sees a notebook as committed, the file keeps its outputs.

Git runs this script on ``notebooks/*.ipynb`` (``.gitattributes``: ``filter=workbench-nbstrip``;
``scripts/install_git_filters.sh``, run by ``make setup``, registers it) whenever it reads a notebook
from the working tree: ``git status``, ``git diff``, ``git add``. The file on disk is never
rewritten, so a notebook run and saved in JupyterLab keeps its outputs across a reload, while
``git status`` stays clean and no commit carries them (the filter reads the notebook on stdin and
writes its committed form on stdout). Nothing hooks JupyterLab's save.

What a run adds and ``strip`` drops: every code cell's outputs and execution count; papermill's
injected-parameters cell; cell metadata other than non-empty ``tags`` and jupytext's
``lines_to_next_cell`` (JupyterLab's ``execution`` timings, ``scrolled``, ``collapsed``,
papermill's own); notebook metadata other than ``jupytext``, ``kernelspec`` and ``workbench``
(``language_info``, which names the Python that ran it, ``widgets``, ``papermill``); the kernel's
display name, which differs between installations, is the python3 kernel's.

The output must be byte for byte the committed file, whoever wrote the notebook, or ``git status``
shows it modified: it is laid out as ``nbformat.write`` lays it out (one-space indent, sorted keys,
non-ASCII kept, a final newline, a cell's source as a list of lines), and numbers are written back
as they were read (Python's ``json`` keeps ``0.0`` a float and ``0`` an int). Standard library only:
git runs it with whatever Python ``make setup`` named, without the project's packages.
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


def source_lines(source: Any) -> Any:
    """A cell's source as nbformat writes it: a list of lines, each with its newline but the last
    (a writer other than nbformat may store one string)."""
    return source.splitlines(keepends=True) if isinstance(source, str) else copy.deepcopy(source)


def strip(notebook: dict[str, Any]) -> dict[str, Any]:
    """The committed form of ``notebook`` (a new dict; the argument is not changed)."""
    cells = []
    for cell in notebook.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        if any(tag in PAPERMILL_TAGS for tag in tags):
            continue  # papermill's injected parameters: a run's, not the notebook's
        kept = {k: copy.deepcopy(v) for k, v in cell.items() if k not in ("outputs", "execution_count", "metadata")}
        if "source" in kept:
            kept["source"] = source_lines(kept["source"])
        # an empty tag list (papermill adds one to every cell) is no tag at all
        kept["metadata"] = {k: copy.deepcopy(v) for k, v in cell.get("metadata", {}).items()
                            if k in CELL_METADATA and v != []}
        if cell.get("cell_type") == "code":
            kept["outputs"], kept["execution_count"] = [], None
        cells.append(kept)
    metadata = {k: copy.deepcopy(v) for k, v in notebook.get("metadata", {}).items() if k in NOTEBOOK_METADATA}
    if "kernelspec" in metadata and metadata["kernelspec"].get("name") == KERNELSPEC["name"]:
        metadata["kernelspec"] = dict(KERNELSPEC)
    representation = metadata.get("jupytext", {}).get("text_representation", {})
    representation.pop("jupytext_version", None)  # the jupytext that last wrote it
    return {**notebook, "cells": cells, "metadata": metadata}


def dumps(notebook: dict[str, Any]) -> str:
    """As ``nbformat.writes`` lays a notebook out, with the final newline ``nbformat.write`` adds."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": ")) + "\n"


def clean(data: bytes) -> bytes:
    """The filter: a notebook's bytes in, its committed form's bytes out."""
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return data  # not a notebook (a half-written file): passed through, never lost
    if not isinstance(notebook, dict):
        return data
    return dumps(strip(notebook)).encode("utf-8")


def main() -> None:
    sys.stdout.buffer.write(clean(sys.stdin.buffer.read()))


if __name__ == "__main__":
    main()
