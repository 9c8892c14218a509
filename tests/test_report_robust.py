"""The main job always finishes: a notebook whose cell runs past its timeout is named in the report
while the others come out, and two reports built at once into one folder each publish a whole report
(``present/report.py``: the staging folder and the lock). Tiny notebooks of the test's own, so each
case takes seconds."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from workbench.present import report

ROOT = Path(__file__).resolve().parents[1]


def _notebook(folder: Path, name: str, source: str, timeout_s: int | None = None) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell('output_dir = "."', metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell(source)]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if timeout_s is not None:
        notebook.metadata["workbench"] = {"cell_timeout_s": timeout_s}
    path = folder / f"{name}.ipynb"
    nbformat.write(notebook, str(path))
    return path


def test_a_cell_past_its_timeout_is_a_failed_notebook_not_a_failed_report(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "seed_rows", lambda device: [])  # the seeds have tests of their own
    slow = _notebook(tmp_path, "01_slow", "import time\ntime.sleep(30)", timeout_s=2)
    quick = _notebook(tmp_path, "02_quick", "from workbench.present.report import report_note\n"
                                            "report_note(output_dir, '02_quick')('all good')")
    log = io.StringIO()
    runs = report.build_report(tmp_path / "out", "cpu", log, notebooks=[slow, quick])
    by_name = {run.name: run for run in runs}
    assert by_name["01_slow"].error is not None and "ran past its 2 s" in by_name["01_slow"].error
    assert by_name["02_quick"].error is None
    page = (tmp_path / "out" / "index.html").read_text()
    assert "01_slow" in page and "02_quick" in page
    assert "notebook 02_quick: ok" in log.getvalue() and "  all good\n" in log.getvalue()  # its note, under its line
    assert by_name["02_quick"].executed == tmp_path / "out" / "notebooks" / "02_quick.ipynb"
    assert by_name["02_quick"].executed.exists()


def test_a_relative_output_folder_as_make_report_gives_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make report` passes `--out reports`, relative to the checkout (a relative staging folder broke
    every notebook: papermill wrote it from the kernel's working folder)."""
    monkeypatch.setattr(report, "seed_rows", lambda device: [])
    monkeypatch.chdir(tmp_path)
    notebooks = [_notebook(tmp_path, f"0{i}_quick", "x = 1") for i in (1, 2)]
    handed: list[Path] = []
    run_papermill = report.run_papermill

    def recorded(source: Path, executed: Path, *args: object, **kwargs: object) -> None:
        handed.append(executed)
        run_papermill(source, executed, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(report, "run_papermill", recorded)
    monkeypatch.setenv("WORKBENCH_REPORT_JOBS", "2")
    log = io.StringIO()
    runs = report.build_report("reports", "cpu", log, notebooks=notebooks)
    assert [run.error for run in runs] == [None, None]
    # papermill changes the process's working folder while it writes a notebook, and the others run
    # in threads of the same process: a relative path was read against another notebook's folder
    assert len(handed) == 2 and all(path.is_absolute() for path in handed), handed
    assert Path.cwd() == tmp_path  # where it was before, not a removed staging folder
    import papermill.iorw

    assert papermill.iorw.papermill_io.get_handler("local")._cwd is None  # nor papermill's own folder
    assert (tmp_path / "reports" / "notebooks" / "01_quick.ipynb").exists()
    assert "wrote reports/index.html" in log.getvalue()


def test_two_reports_at_once_into_one_folder_both_finish_whole(tmp_path: Path) -> None:
    """Two processes, as two `make report`s on one checkout would be (papermill changes the working
    folder of its own process, so two reports in one process are not the case to test)."""
    started = tmp_path / "started"  # the first report is inside its notebook: the second one starts then
    notebooks = [_notebook(tmp_path, "01_n", f"from pathlib import Path\nPath({str(started)!r}).touch()\n"
                                             "import time\ntime.sleep(4)"),
                 _notebook(tmp_path, "02_n", "import time\ntime.sleep(1)")]
    out = tmp_path / "reports"
    script = ("import io, sys; from pathlib import Path; from workbench.present import report\n"
              "runs = report.build_report(Path(sys.argv[1]), 'cpu', io.StringIO(), notebooks=[Path(a) for a in sys.argv[2:]])\n"
              "print([run.error for run in runs])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    processes = []
    for _ in range(2):
        processes.append(subprocess.Popen([sys.executable, "-c", script, str(out), *map(str, notebooks)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + 300
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    for process in processes:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        assert stdout.strip() == "[None, None]"
    assert sorted(p.name for p in (out / "notebooks").glob("*.ipynb")) == ["01_n.ipynb", "02_n.ipynb"]
    assert (out / "index.html").exists() and len(json.loads((out / "seeds.json").read_text())) == 6  # 3 seeds x 2 sides
    assert not list(tmp_path.glob(".reports.building-*-*")), "a staging folder was left behind"


def test_a_report_killed_midway_leaves_the_last_whole_report_and_no_litter(tmp_path: Path) -> None:
    started = tmp_path / "started"
    notebooks = [_notebook(tmp_path, "01_n", "import time\ntime.sleep(0.5)"),
                 _notebook(tmp_path, "02_n", f"from pathlib import Path\nPath({str(started)!r}).touch()\n"
                                             "import time\ntime.sleep(60)", timeout_s=120)]
    out = tmp_path / "reports"
    first = _report_process(out, notebooks[:1])
    assert first.wait(timeout=600) == 0
    assert (out / "notebooks" / "01_n.ipynb").exists()
    second = _report_process(out, notebooks)  # killed while its second notebook runs
    deadline = time.monotonic() + 300
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    second.kill()
    second.wait(timeout=60)
    assert sorted(p.name for p in (out / "notebooks").glob("*.ipynb")) == ["01_n.ipynb"]  # the first report, whole
    assert (out / "index.html").exists() and (out / "seeds.json").exists()
    assert len(list(tmp_path.glob(".reports.building-*-*"))) == 1  # the killed one's, until the next report
    third = _report_process(out, notebooks[:1])
    assert third.wait(timeout=600) == 0
    assert not list(tmp_path.glob(".reports.building-*-*"))


def _report_process(out: Path, notebooks: list[Path]) -> subprocess.Popen[str]:
    script = ("import io, sys; from pathlib import Path; from workbench.present import report\n"
              "report.build_report(Path(sys.argv[1]), 'cpu', io.StringIO(), notebooks=[Path(a) for a in sys.argv[2:]])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", script, str(out), *map(str, notebooks)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def test_progress_names_the_cell_a_running_notebook_is_at(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("1", metadata={"papermill": {"status": "completed"}}),
                      nbformat.v4.new_markdown_cell("words"),
                      nbformat.v4.new_code_cell("2", metadata={"papermill": {"status": "running"}}),
                      nbformat.v4.new_code_cell("3", metadata={"papermill": {"status": "pending"}})]
    path = tmp_path / "nb.ipynb"
    nbformat.write(notebook, str(path))
    assert report.cell_progress(path) == "cell 2 of 3"
    assert report.cell_progress(tmp_path / "absent.ipynb") == "starting"
    path.write_text('{"cells": [')  # being rewritten
    assert report.cell_progress(path) == "starting"
