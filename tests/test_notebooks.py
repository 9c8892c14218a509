"""papermill as the regression runner: every notebook executes with its small test parameters.

Each notebook ends with assertion cells, so a notebook that executes is a passing regression
test and one whose expectation breaks makes papermill raise here. The notebooks are found by glob,
so a notebook added to ``notebooks/`` is run without touching this file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from workbench.present.report import NOTEBOOKS_DIR, notebook_paths, notebook_test_parameters, run_papermill

NOTEBOOKS = notebook_paths()


def _execute(source: Path, out: Path, **parameters: Any) -> None:
    params = {"device": "cpu", "output_dir": str(out), "cache_dir": str(out / "cache"),
              **notebook_test_parameters(source), **parameters}
    run_papermill(source, out / source.name, params, cwd=source.parent)


def test_notebooks_are_found_in_name_order() -> None:
    names = [path.name for path in NOTEBOOKS]
    assert names[:4] == ["00_overview.ipynb", "01_npu_block_tables.ipynb", "02_dsa_page_table.ipynb",
                         "03_allocator_exact_fit.ipynb"]
    assert names == sorted(names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs_and_starts_with_parameters(path: Path) -> None:
    notebook = nbformat.read(str(path), as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert "check" in code[1].source or "check_" in code[1].source  # the validation cell
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_every_notebook_executes_with_small_parameters(small_report: tuple[Path, list[Any], str]) -> None:
    out, runs, log = small_report
    assert [run.name for run in runs] == [path.stem for path in NOTEBOOKS]
    failed = {run.name: run.error for run in runs if run.error}
    assert not failed, log
    for run in runs:
        executed = nbformat.read(str(run.executed), as_version=4)
        assert all(cell.execution_count for cell in executed.cells if cell.cell_type == "code" and cell.source.strip())
        assert run.html is not None and run.html.stat().st_size > 10_000


def test_report_page_is_self_contained(small_report: tuple[Path, list[Any], str]) -> None:
    out, runs, _ = small_report
    page = (out / "index.html").read_text()
    figures = sorted((out / "figures").glob("*.json"))
    prefixes = {path.stem[:2] for path in figures}
    assert {"01", "02", "03", "04", "05"} <= prefixes
    for figure in figures:
        assert f'id="fig-{figure.stem}"' in page
    # No figure twice: notebook 00 shows the component figures that 01-03 publish, and publishes none
    drawn = {}
    for figure in figures:
        data = json.dumps(json.loads(figure.read_text())["data"], sort_keys=True)
        assert data not in drawn, f"{figure.stem} draws what {drawn.get(data)} draws"
        drawn[data] = figure.stem
    assert page.count("plotly.js v") >= 1  # the library itself, inlined once
    assert '<script src="http' not in page and "cdn.plot.ly" not in page.split("<body>")[1][:2000]
    for run in runs:
        assert f'href="notebooks/{run.name}.html"' in page
    seeds = json.loads((out / "seeds.json").read_text())
    assert [row["outcome"] for row in seeds] == ["shape-error", "ok", "shape-error", "ok", "index-error", "ok"]
    assert "32753" in page and "90001" in page


def test_a_broken_expectation_fails_the_run(tmp_path: Path) -> None:
    """Claiming the legacy ``context`` rule safe must make the assertion cell raise."""
    from papermill.exceptions import PapermillExecutionError

    source = NOTEBOOKS_DIR / "01_npu_block_tables.ipynb"
    with pytest.raises(PapermillExecutionError) as failure:
        _execute(source, tmp_path, safe_rules=["context", "req-to-token"])
    assert failure.value.ename == "AssertionError"
    executed = nbformat.read(str(tmp_path / source.name), as_version=4)
    failing = [c for c in executed.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failing) == 1 and "safe_rules" in failing[0].source


def test_a_bad_parameter_stops_at_the_validation_cell(tmp_path: Path) -> None:
    from papermill.exceptions import PapermillExecutionError

    source = NOTEBOOKS_DIR / "02_dsa_page_table.ipynb"
    with pytest.raises(PapermillExecutionError) as failure:
        _execute(source, tmp_path, page_sizes=[64, 0])
    assert failure.value.ename == "ParameterError"
    assert failure.value.evalue == "page_sizes[1]: 0 is out of range (allowed: 1 to 4096)"
    assert not list((tmp_path / "figures").glob("*.json"))  # nothing ran past the check
