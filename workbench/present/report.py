"""The main job: seed cases, every notebook executed through papermill, one offline HTML report.

``run_report(out_dir, device, out)`` does four things, in this order:

1. reproduces the three seed cases and prints their table (``seeds.json`` too);
2. executes every ``notebooks/*.ipynb`` (by glob, in name order) with papermill on ``device``
   into ``<out>/notebooks/NAME.ipynb`` and renders each as ``NAME.html`` beside it;
3. exports every figure the notebooks wrote as plotly JSON into ``<out>/figures/NN_name.json`` as
   ``<out>/png/NN_name.png`` through kaleido where a Chromium is installed, and says so in one line
   where none is;
4. assembles ``<out>/index.html`` (``workbench.present.report_page``): the findings of the atlas's
   results (``<out>/results/05_atlas_summary.json``) first, then the seed table, then the details
   (notebook 00's rule table, every figure with its caption, a link to every executed notebook).

The figure contract, for notebook authors: a notebook receives ``output_dir`` as a parameter and
writes each figure with ``save_figure(fig, output_dir, "NN_name", caption)``, ``NN`` being its own
prefix, and frames the page reads with ``save_results(frame, output_dir, "NN_name")``. Words are
the glossary's ([docs/glossary.md](../../docs/glossary.md)).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from workbench.analysis.seeds import SEEDS, boundary_case
from workbench.files import atomic_write_text, exclusive
from workbench.present.notebook_params import NOTEBOOKS_DIR
from workbench.present.report_page import NotebookRun, report_html

KERNEL_NAME = "python3"  # jupyter_client runs a "python" kernel with the running interpreter
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
NO_CHROMIUM = (
    "no Chromium found: PNG export skipped (install Debian's chromium, `apt-get install chromium`, "
    "or set BROWSER_PATH to a Chrome/Chromium binary)"
)


# ---- seeds -------------------------------------------------------------------------------------


def seed_rows(device: str) -> list[dict[str, object]]:
    """One row per seed and side of its fix: outcome, message, and the table's boundary."""
    from workbench.analysis.records import boundary_record, probe_record

    rows = []
    for seed in SEEDS:
        for side, case in (("before", seed.before), ("after", seed.after)):
            result = probe_record(case, device)
            row: dict[str, object] = {
                "seed": seed.name, "fix": side,
                "rule": case.get("rule", case.get("gather")),
                "outcome": result["outcome"], "error": result["error"],
            }
            if seed.name != "allocator":
                row["first_failing_seq_len"] = boundary_record(boundary_case(case), device)["first_failing_seq_len"]
            else:
                row["out_cache_loc"] = result.get("out_cache_loc")
            rows.append(row)
    return rows


def _seed_cells(row: dict[str, object]) -> tuple[str, str, str, str, str, str]:
    boundary = row.get("first_failing_seq_len", "")
    detail = row["error"] or (f"out_cache_loc={row['out_cache_loc']}" if "out_cache_loc" in row else "")
    boundary_text = "none" if boundary is None else str(boundary)
    return str(row["seed"]), str(row["fix"]), str(row["rule"]), str(row["outcome"]), boundary_text, str(detail)


def seed_table_frame(rows: Sequence[dict[str, object]]) -> Any:
    """The seed rows as a DataFrame of text: boundaries as integers or "none", as on the page."""
    import pandas as pd  # type: ignore[import-untyped]

    columns = ["seed", "fix", "rule / gather", "outcome", "boundary", "detail"]
    return pd.DataFrame([_seed_cells(row) for row in rows], columns=columns)


def seed_table_text(rows: Sequence[dict[str, object]]) -> str:
    header = f"{'seed':<16} {'fix':<7} {'rule / gather':<19} {'outcome':<12} {'boundary':>9}  detail"
    lines = [header, "-" * len(header)]
    for row in rows:
        seed, fix, rule, outcome, boundary, detail = _seed_cells(row)
        lines.append(f"{seed:<16} {fix:<7} {rule:<19} {outcome:<12} {boundary:>9}  {detail}")
    return "\n".join(lines) + "\n"


# ---- notebooks ---------------------------------------------------------------------------------


def notebook_paths(folder: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Every notebook of the folder, in name order (a notebook added later is picked up)."""
    return sorted(folder.glob("*.ipynb"))


def notebook_test_parameters(path: Path) -> dict[str, Any]:
    """The small parameters a notebook declares for the test suite (``metadata.workbench``)."""
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    params = notebook.metadata.get("workbench", {}).get("test_parameters", {})
    return dict(params)


def notebook_engines(path: Path) -> list[str]:
    """The engine releases a notebook reads (``metadata.workbench.engines``): fetched before it runs."""
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    return [str(e) for e in notebook.metadata.get("workbench", {}).get("engines", [])]


def fetch_engines(sources: Sequence[Path], out: IO[str]) -> None:
    """Fetch the releases the notebooks read into the engine cache first, each said as it goes: a
    first fetch (tens of seconds to minutes for a vLLM wheel) is not a notebook cell's time, and a
    release that cannot be had is said here (the notebook's check then says UNDECIDED)."""
    from workbench.engines.store import wheels

    wanted = list(dict.fromkeys(e for source in sources for e in notebook_engines(source)))
    missing = [e for e in wanted if wheels.cached(e) is None]
    for number, engine in enumerate(missing, 1):
        out.write(f"fetching {engine} for the notebooks ({number}/{len(missing)}) into {wheels.cache_root()}...\n")
        out.flush()
        try:
            wheels.fetch(engine)
        except wheels.FetchError as err:
            out.write(f"  {err}\n")


EXECUTION_TIMEOUT_S = 300  # per cell, unless the notebook declares its own (metadata.workbench.cell_timeout_s)
HANG_RETRIES = 1
PROGRESS_EVERY_S = 60.0  # a line per running notebook this often: which cell, how long


def notebook_cell_timeout(path: Path) -> int:
    """The longest a cell of this notebook may take, in seconds: ``metadata.workbench.cell_timeout_s``
    where the notebook has a cell known to be slow (05's atlas the first time over every release),
    else ``EXECUTION_TIMEOUT_S``. A cell past it counts as a kernel that stopped answering."""
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    return int(notebook.metadata.get("workbench", {}).get("cell_timeout_s", EXECUTION_TIMEOUT_S))


def run_papermill(source: Path, executed: Path, parameters: dict[str, Any], *, cwd: Path,
                  timeout_s: int = EXECUTION_TIMEOUT_S) -> None:
    """``papermill.execute_notebook`` that cannot hang forever.

    Seen here: under heavy load a kernel reply can go missing and papermill then waits for ever
    with an idle kernel. A cell timeout turns that into an error and the notebook runs once more;
    a cell that fails (``PapermillExecutionError``) is a result, raised at once and never retried.
    """
    import papermill  # type: ignore[import-untyped]
    from nbclient.exceptions import CellTimeoutError, DeadKernelError  # type: ignore[import-untyped]

    for attempt in range(HANG_RETRIES + 1):
        try:
            papermill.execute_notebook(
                str(source), str(executed), parameters=parameters, cwd=str(cwd), kernel_name=KERNEL_NAME,
                progress_bar=False, log_output=False, execution_timeout=timeout_s,
            )
            return
        except (CellTimeoutError, DeadKernelError, TimeoutError) as err:
            if attempt == HANG_RETRIES:
                raise
            print(f"workbench: {source.name}: the kernel stopped answering ({err}); running it again", file=sys.stderr)


def execute_notebook(
    source: Path, out_dir: Path, device: str, parameters: dict[str, Any] | None = None
) -> NotebookRun:
    """Run ``source`` with papermill and render the result as HTML. The kernel runs in ``out_dir``,
    not the notebook's folder: a notebook reads its relative folders against its own folder, not the
    working directory (``notebook_params.resolve_folder``), and every report run shows it does.

    A failing cell does not raise: the partly executed notebook is kept (papermill marks the
    failing cell) and the error is returned, so the report can show it and go on.
    """
    from nbclient.exceptions import CellTimeoutError, DeadKernelError  # type: ignore[import-untyped]
    from papermill.exceptions import PapermillExecutionError  # type: ignore[import-untyped]

    folder = out_dir / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    executed = folder / source.name
    params = {"device": device, "output_dir": str(out_dir.resolve()), **(parameters or {})}
    started = time.perf_counter()
    error = None
    timeout_s = notebook_cell_timeout(source)
    try:
        run_papermill(source, executed, params, cwd=out_dir.resolve(), timeout_s=timeout_s)
    except PapermillExecutionError as err:
        error = f"cell {err.exec_count}: {err.ename}: {err.evalue}"
    except (CellTimeoutError, DeadKernelError, TimeoutError) as err:  # a result too: the other notebooks go on
        error = (f"{type(err).__name__}: a cell ran past its {timeout_s} s or the kernel stopped answering, "
                 f"{HANG_RETRIES + 1} times ({err})")
    seconds = time.perf_counter() - started
    page = _render_notebook_html(executed) if executed.exists() else None
    return NotebookRun(source.stem, executed, page, seconds, error)


def _render_notebook_html(executed: Path) -> Path:
    import nbformat
    from nbconvert import HTMLExporter

    notebook = nbformat.read(str(executed), as_version=4)  # type: ignore[no-untyped-call]
    body, _ = HTMLExporter().from_notebook_node(notebook)  # type: ignore[no-untyped-call]
    page = executed.with_suffix(".html")
    atomic_write_text(page, body)
    return page


# ---- figures -----------------------------------------------------------------------------------


def save_figure(fig: Any, output_dir: str | Path, name: str, caption: str = "", claims: Sequence[Any] = ()) -> Path:
    """Write ``fig`` as plotly JSON to ``<output_dir>/figures/NAME.json``, for the report.

    ``caption`` is the one line the report prints under the figure: what to see in it; ``claims``
    (``workbench.present.claims.Claim``) are the facts its sentences state, each checked against the
    results the notebook saved (``tests/test_claims.py``). Both are kept in the figure's ``layout.meta``."""
    if caption or claims:
        fig.update_layout(meta={"caption": caption, "claims": [c.to_json() for c in claims]})
    path = Path(output_dir) / "figures" / f"{name}.json"
    atomic_write_text(path, fig.to_json())
    return path


def save_table(frame: Any, output_dir: str | Path, name: str) -> Path:
    """Write a small table (a DataFrame of text cells, any index) to ``<output_dir>/tables/NAME.json``;
    the report opens with the tables it finds there, in name order."""
    flat = frame.reset_index()
    data = {"columns": [str(c) for c in flat.columns], "rows": [[str(v) for v in row] for row in flat.itertuples(index=False)]}
    path = Path(output_dir) / "tables" / f"{name}.json"
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return path


def save_results(frame: Any, output_dir: str | Path, name: str) -> Path:
    """Write a frame of results (the atlas's summary, a sweep) as JSON records to
    ``<output_dir>/results/NAME.json``: what the report's findings and the claims test read."""
    records = json.loads(frame.reset_index(drop=True).to_json(orient="records"))
    path = Path(output_dir) / "results" / f"{name}.json"
    atomic_write_text(path, json.dumps(records, indent=0) + "\n")
    return path


def report_note(output_dir: str | Path, name: str) -> Callable[[str], None]:
    """A notebook's one-line notes for the report's log (a cached result reused, say): each is printed
    in the notebook and kept in ``<output_dir>/notes/NAME.txt``, which the report prints under the
    notebook's own line."""
    path = Path(output_dir) / "notes" / f"{name}.txt"

    def note(line: str) -> None:
        print(line)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    return note


def notes_of(out_dir: Path, name: str) -> list[str]:
    path = out_dir / "notes" / f"{name}.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def figure_files(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "figures").glob("*.json"))


def table_files(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "tables").glob("*.json"))


def find_chromium() -> str | None:
    """A Chrome/Chromium binary for kaleido: ``BROWSER_PATH`` if set, else one on PATH."""
    configured = os.environ.get("BROWSER_PATH")
    if configured and Path(configured).is_file():
        return configured
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def export_pngs(figures: Sequence[Path], png_dir: Path) -> tuple[list[Path], str | None]:
    """PNG copies of the figures through kaleido; ``([], reason)`` where that cannot be done."""
    if not figures:
        return [], None
    browser = find_chromium()
    if browser is None:
        return [], NO_CHROMIUM
    import plotly.io as pio  # type: ignore[import-untyped]

    os.environ["BROWSER_PATH"] = browser  # where kaleido's choreographer looks first
    png_dir.mkdir(parents=True, exist_ok=True)
    paths = [png_dir / f"{figure.stem}.png" for figure in figures]
    try:
        # One kaleido session for all figures: Chromium starts once, not once per figure.
        # Each figure at its own size (tall failure maps stay readable); 1100 x 600 where it sets none.
        figs = [pio.read_json(str(f)) for f in figures]
        sizes = [(fig.layout.width or 1100, fig.layout.height or 600) for fig in figs]
        pio.write_images(figs, [str(p) for p in paths], width=[w for w, _ in sizes], height=[h for _, h in sizes])
        # A loaded machine's browser can drop a figure of the batch without an error: those once more, alone
        for fig, path, (width, height) in zip(figs, paths, sizes):
            if not path.exists():
                pio.write_image(fig, str(path), width=width, height=height)
    except Exception as err:  # kaleido wraps browser failures in several types; report, don't crash
        return [], f"PNG export failed with {browser}: {type(err).__name__}: {err}"
    left = [p.stem for p in paths if not p.exists()]
    if left:
        return [p for p in paths if p.exists()], f"PNG export with {browser} wrote no file for {', '.join(left)}"
    return paths, None


# ---- the main job ------------------------------------------------------------------------------


def build_report(
    out_dir: str | Path, device: str, out: IO[str], *, notebooks: Sequence[Path] | None = None,
    small: bool = False,
) -> list[NotebookRun]:
    """Seeds, notebooks, HTML and PNGs into ``out_dir``; returns the notebook runs.

    ``small`` runs each notebook with the test parameters it declares (the test suite's mode).

    The report is built in a folder of its own beside ``out_dir`` (``.NAME.building-*``, at the same
    depth, so its relative links hold) and moved into ``out_dir`` when complete, under a lock: two
    reports run at once into one folder each publish a whole report, the later one last, and neither
    deletes a folder the other is writing into. Every path handed to papermill is absolute, and the
    working folder is restored after the notebooks: papermill changes the process's working folder
    while it writes, and notebooks run in threads of one process, so a relative path was read against
    another notebook's folder (issue 41's "output folder reports/notebooks doesn't exist").
    An interrupted report leaves the last complete one in place.
    """
    final = Path(out_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(final)
    # absolute: papermill writes each executed notebook from the kernel's working folder (the output)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.building-{os.getpid()}-", dir=final.resolve().parent))
    working = os.getcwd()
    try:
        try:
            runs = _build_into(staging, final, device, out, notebooks, small)
        finally:
            # papermill changes the process's working folder while it writes, and keeps the folder
            # its file I/O runs in as process-wide state; notebooks run in threads, so two at once
            # can leave either in the staging folder, which is removed below
            os.chdir(working)
            _reset_papermill_folder()
        with exclusive(final.parent / f".{final.name}.building-lock"):
            _publish(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [_moved(run, staging, final) for run in runs]


def _reset_papermill_folder() -> None:
    """papermill's local file handler back to no working folder of its own (its state at import):
    ``local_file_io_cwd`` saves and restores it around each notebook, which threads interleave."""
    import papermill.iorw  # type: ignore[import-untyped]

    papermill.iorw.papermill_io.get_handler("local").cwd(None)


def _remove_abandoned(final: Path) -> None:
    """Remove the staging folders of reports that were killed (their process is gone)."""
    for folder in final.parent.glob(f".{final.name}.building-*-*"):
        pid = folder.name.rsplit(".building-", 1)[1].split("-", 1)[0]
        if folder.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _publish(staging: Path, final: Path) -> None:
    """Move each entry the report made from ``staging`` into ``final``; an entry already there (an
    earlier report's) is moved aside into ``staging`` first, and goes with it."""
    final.mkdir(parents=True, exist_ok=True)
    for entry in sorted(staging.iterdir()):
        if entry.name.startswith(".replaced-"):
            continue
        target = final / entry.name
        if target.exists() or target.is_symlink():
            os.replace(target, staging / f".replaced-{entry.name}")
        os.replace(entry, target)


def _moved(run: NotebookRun, staging: Path, final: Path) -> NotebookRun:
    def where(path: Path | None) -> Path | None:
        return None if path is None else final / path.relative_to(staging)

    executed = where(run.executed)
    assert executed is not None
    return dataclasses.replace(run, executed=executed, html=where(run.html))


def _build_into(out_path: Path, final: Path, device: str, out: IO[str], notebooks: Sequence[Path] | None,
                small: bool) -> list[NotebookRun]:
    """The report built in ``out_path``; the lines it prints name ``final``, where it will be."""
    rows = seed_rows(device)
    out.write(seed_table_text(rows))
    atomic_write_text(out_path / "seeds.json", json.dumps(rows, indent=2) + "\n")
    sources = notebook_paths() if notebooks is None else list(notebooks)
    fetch_engines(sources, out)
    runs = _run_notebooks(sources, out_path, device, small, out)
    figures = figure_files(out_path)
    pngs, png_note = export_pngs(figures, out_path / "png")
    out.write(png_note + "\n" if png_note else f"wrote {len(pngs)} PNGs to {final / 'png'}\n")
    page = out_path / "index.html"
    cells = [_seed_cells(row) for row in rows]
    atomic_write_text(page, report_html(cells, runs, figures, out_path, device, png_note, table_files(out_path)))
    out.write(f"wrote {final / page.name} ({len(figures)} figures, {len(runs)} notebooks)\n")
    return runs


def report_jobs(count: int) -> int:
    """How many notebooks run at once: ``WORKBENCH_REPORT_JOBS``, else one per CPU core, at most
    ``count``. Each runs in a kernel process of its own and writes only its own files."""
    asked = os.environ.get("WORKBENCH_REPORT_JOBS", "")
    if asked and not (asked.isdigit() and int(asked) > 0):
        raise ValueError(f"WORKBENCH_REPORT_JOBS: {asked!r} is not a positive whole number")
    return max(1, min(count, int(asked) if asked else (os.cpu_count() or 1)))


def _run_notebooks(sources: Sequence[Path], out_path: Path, device: str, small: bool, out: IO[str]) -> list[NotebookRun]:
    """Every notebook, ``report_jobs`` at a time, in the order given; a line each as it ends."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()

    def run_one(source: Path) -> NotebookRun:
        run = execute_notebook(source, out_path, device, notebook_test_parameters(source) if small else None)
        state = f"FAILED {run.error}" if run.error else "ok"
        with lock:
            out.write(f"notebook {run.name}: {state} ({run.seconds:.1f} s)\n")
            out.writelines(f"  {line}\n" for line in notes_of(out_path, run.name))
            out.flush()
        return run

    jobs = report_jobs(len(sources))
    if jobs > 1:
        out.write(f"running {len(sources)} notebooks, {jobs} at a time (WORKBENCH_REPORT_JOBS)\n")
    running: dict[str, float] = {}  # the notebooks running now, and since when

    def run_tracked(source: Path) -> NotebookRun:
        with lock:
            running[source.stem] = time.perf_counter()
        try:
            return run_one(source)
        finally:
            with lock:
                running.pop(source.stem, None)

    done = threading.Event()
    reporter = threading.Thread(target=_report_progress, args=(running, lock, out_path, out, done), daemon=True)
    reporter.start()
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(run_tracked, sources))
    finally:
        done.set()
        reporter.join()


def _report_progress(running: dict[str, float], lock: Any, out_path: Path, out: IO[str], done: Any) -> None:
    """Every ``PROGRESS_EVERY_S``, a line per notebook still running: the cell it is at and for how long
    (read from the executed notebook papermill writes as each cell ends)."""
    while not done.wait(PROGRESS_EVERY_S):
        with lock:
            now = time.perf_counter()
            for name, since in sorted(running.items()):
                out.write(f"notebook {name}: still running, {cell_progress(out_path / 'notebooks' / f'{name}.ipynb')}, "
                          f"{now - since:.0f} s\n")
            out.flush()


def cell_progress(executed: Path) -> str:
    """"cell K of N" for a notebook papermill is executing, from the cells it has marked; "starting"
    before it wrote the file (or while the file is being rewritten)."""
    try:
        cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return "starting"
    code = [c for c in cells if c.get("cell_type") == "code"]
    finished = sum(1 for c in code if c.get("metadata", {}).get("papermill", {}).get("status") == "completed")
    return f"cell {min(finished + 1, len(code))} of {len(code)}"


def run_report(out_dir: str, device: str, out: IO[str]) -> None:
    """The command line's ``report``: the whole job; a failed notebook is an error after the page is written."""
    runs = build_report(out_dir, device, out)
    from workbench.repro.page import write_report_findings  # <out>/findings.md; docs/findings.md is left as committed

    out.write(f"wrote {write_report_findings(out_dir)}\n")
    failed = [run for run in runs if run.error]
    if failed:
        names = ", ".join(run.name for run in failed)
        raise ReportError(f"{len(failed)} of {len(runs)} notebooks failed ({names}); see {Path(out_dir) / 'index.html'}")


class ReportError(RuntimeError):
    """The report was written but a notebook failed (the command line prints it and exits non-zero)."""
