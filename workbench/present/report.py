"""The main job: seed cases, every notebook executed through papermill, one offline HTML report.

``run_report(out_dir, device, out)`` does four things, in this order:

1. reproduces the three seed cases and prints their table (``seeds.json`` too);
2. executes every ``notebooks/*.ipynb`` (by glob, in name order) with papermill on ``device``
   into ``<out>/notebooks/NAME.ipynb`` and renders each as ``NAME.html`` beside it;
3. assembles ``<out>/index.html``: the seed table, every figure the notebooks wrote as plotly JSON
   into ``<out>/figures/NN_name.json`` (plotly.js inlined once, so the page works offline) and a
   link to every executed notebook;
4. exports every figure as ``<out>/png/NN_name.png`` through kaleido where a Chromium is
   installed, and says so in one line where none is.

The figure contract, for notebook authors: a notebook receives ``output_dir`` as a parameter and
writes each figure with ``save_figure(fig, output_dir, "NN_name")``, ``NN`` being its own prefix.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from workbench.analysis.seeds import SEEDS, boundary_case
from workbench.files import atomic_write_text

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
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


@dataclass(frozen=True)
class NotebookRun:
    """One notebook executed by papermill: where its outputs are, and how it went."""

    name: str  # the file stem, e.g. "01_npu_block_tables"
    executed: Path  # <out>/notebooks/NAME.ipynb (written even when a cell failed)
    html: Path | None  # the executed notebook rendered as HTML
    seconds: float
    error: str | None  # None: every cell ran; else "cell N: Name: message"


def notebook_paths(folder: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Every notebook of the folder, in name order (a notebook added later is picked up)."""
    return sorted(folder.glob("*.ipynb"))


def notebook_test_parameters(path: Path) -> dict[str, Any]:
    """The small parameters a notebook declares for the test suite (``metadata.workbench``)."""
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
    params = notebook.metadata.get("workbench", {}).get("test_parameters", {})
    return dict(params)


EXECUTION_TIMEOUT_S = 120  # per cell; the slowest cell here takes about 20 s on a loaded 2-core machine
HANG_RETRIES = 1


def run_papermill(source: Path, executed: Path, parameters: dict[str, Any], *, cwd: Path) -> None:
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
                progress_bar=False, log_output=False, execution_timeout=EXECUTION_TIMEOUT_S,
            )
            return
        except (CellTimeoutError, DeadKernelError, TimeoutError) as err:
            if attempt == HANG_RETRIES:
                raise
            print(f"workbench: {source.name}: the kernel stopped answering ({err}); running it again", file=sys.stderr)


def execute_notebook(
    source: Path, out_dir: Path, device: str, parameters: dict[str, Any] | None = None
) -> NotebookRun:
    """Run ``source`` with papermill (kernel cwd = its folder) and render the result as HTML.

    A failing cell does not raise: the partly executed notebook is kept (papermill marks the
    failing cell) and the error is returned, so the report can show it and go on.
    """
    from papermill.exceptions import PapermillExecutionError  # type: ignore[import-untyped]

    folder = out_dir / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    executed = folder / source.name
    params = {"device": device, "output_dir": str(out_dir.resolve()), **(parameters or {})}
    started = time.perf_counter()
    error = None
    try:
        run_papermill(source, executed, params, cwd=source.parent)
    except PapermillExecutionError as err:
        error = f"cell {err.exec_count}: {err.ename}: {err.evalue}"
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


def save_figure(fig: Any, output_dir: str | Path, name: str, caption: str = "") -> Path:
    """Write ``fig`` as plotly JSON to ``<output_dir>/figures/NAME.json``, for the report.

    ``caption`` is the one line the report prints under the figure: what to see in it (kept in
    the figure's ``layout.meta``)."""
    if caption:
        fig.update_layout(meta={"caption": caption})
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
        pio.write_images(figs, [str(p) for p in paths], width=[fig.layout.width or 1100 for fig in figs],
                         height=[fig.layout.height or 600 for fig in figs])
    except Exception as err:  # kaleido wraps browser failures in several types; report, don't crash
        return [], f"PNG export failed with {browser}: {type(err).__name__}: {err}"
    return paths, None


# ---- the HTML page -----------------------------------------------------------------------------


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9rem; } td, th { padding: 0.25rem 0.6rem; border: 1px solid #ddd; }
th { background: #f4f4f4; text-align: left; } .failed { color: #b00020; font-weight: 600; }
.figure { margin: 1.2rem 0 2rem; } .note { color: #555; font-style: italic; }
.caption { color: #333; margin: 0.2rem 0 0.6rem; } td.safe { color: #1b5e20; } td.fails { color: #b00020; }
td.silent { color: #e65100; font-weight: 600; } table.verdict { margin-bottom: 1rem; }
"""


def _seed_table_html(rows: Sequence[dict[str, object]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("seed", "fix", "rule / gather", "outcome", "boundary", "detail"))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in _seed_cells(row)) + "</tr>" for row in rows
    )
    return f'<table id="seeds"><tr>{head}</tr>{body}</table>'


def _notebook_list_html(runs: Sequence[NotebookRun], out_dir: Path) -> str:
    items = []
    for run in runs:
        target = run.html or run.executed
        link = f'<a href="{html.escape(target.relative_to(out_dir).as_posix())}">{html.escape(run.name)}</a>'
        status = (
            f'<span class="failed">failed: {html.escape(run.error)}</span>' if run.error else "every cell ran"
        )
        items.append(f"<li>{link} ({run.seconds:.1f} s): {status}</li>")
    return '<ul id="notebooks">' + "".join(items) + "</ul>"


def _tables_html(tables: Sequence[Path]) -> str:
    parts = []
    for path in tables:
        data = json.loads(path.read_text())
        head = "".join(f"<th>{html.escape(c)}</th>" for c in data["columns"])
        body = "".join("<tr>" + "".join(f'<td class="{_verdict_class(cell)}">{html.escape(cell)}</td>' for cell in row)
                       + "</tr>" for row in data["rows"])
        parts.append(f'<table class="verdict" id="table-{html.escape(path.stem)}"><tr>{head}</tr>{body}</table>')
    return "".join(parts) or '<p class="note">No verdict table: notebook 00 did not run.</p>'


def _verdict_class(cell: str) -> str:
    for word, name in (("fails silently", "silent"), ("fails", "fails"), ("safe", "safe")):
        if cell.startswith(word):
            return name
    return ""


def _figures_html(figures: Sequence[Path]) -> str:
    import plotly.io as pio  # type: ignore[import-untyped]

    parts = []
    for index, path in enumerate(figures):
        fig = pio.read_json(str(path))
        caption = (fig.layout.meta or {}).get("caption", "") if isinstance(fig.layout.meta, dict) else ""
        # plotly.js (about 4.6 MB) is inlined with the first figure only; the rest reuse it.
        div = fig.to_html(full_html=False, include_plotlyjs=index == 0, div_id=f"fig-{path.stem}",
                          config={"displaylogo": False})
        parts.append(f'<section class="figure"><h3>{html.escape(path.stem)}</h3>'
                     f'<p class="caption">{html.escape(caption)}</p>{div}</section>')
    return "".join(parts)


VERDICT_INTRO = (
    "Each cell: <b>safe</b> (no committed length up to ctx - 1 + overshoot fails, in every configuration swept), "
    "<b>fails at s = N</b> (a copy raises; N is the first failing committed length of the configuration that fails "
    "earliest past its context) or <b>fails silently</b> (nothing raises, a kernel would read past the table or the "
    "free list), and how many of the configurations swept fail. From notebook 00's sweeps, the grids of notebooks 01-03."
)


def report_html(
    rows: Sequence[dict[str, object]], runs: Sequence[NotebookRun], figures: Sequence[Path], out_dir: Path,
    device: str, png_note: str | None, tables: Sequence[Path] = (),
) -> str:
    png_line = f'<p class="note" id="png-note">{html.escape(png_note)}</p>' if png_note else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>workbench design review</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<h1>workbench: graph-captured KV metadata, design review</h1>"
        f"<p>Device: <code>{html.escape(device)}</code>. Every number below comes from executed torch steps.</p>"
        f'<h2>Verdict: which backends and rules are safe</h2><p class="note">{VERDICT_INTRO}</p>{_tables_html(tables)}'
        f"<h2>Seed cases</h2>{_seed_table_html(rows)}"
        '<p><a href="findings.md">Findings and their standalone reproducers</a> (docs/findings.md)</p>'
        f"<h2>Executed notebooks</h2>{_notebook_list_html(runs, out_dir)}"
        f"<h2>Figures ({len(figures)})</h2>{png_line}{_figures_html(figures)}"
        "</body></html>\n"
    )


# ---- the main job ------------------------------------------------------------------------------


def _fresh(folder: Path) -> None:
    """Empty a folder the report owns, so no figure of an earlier run is shown as current."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def build_report(
    out_dir: str | Path, device: str, out: IO[str], *, notebooks: Sequence[Path] | None = None,
    small: bool = False,
) -> list[NotebookRun]:
    """Seeds, notebooks, HTML and PNGs into ``out_dir``; returns the notebook runs.

    ``small`` runs each notebook with the test parameters it declares (the test suite's mode).
    """
    out_path = Path(out_dir)
    out_path.mkdir(parents=True, exist_ok=True)
    rows = seed_rows(device)
    out.write(seed_table_text(rows))
    atomic_write_text(out_path / "seeds.json", json.dumps(rows, indent=2) + "\n")
    for owned in ("figures", "tables", "png", "notebooks"):
        _fresh(out_path / owned)
    runs = []
    for source in notebook_paths() if notebooks is None else notebooks:
        run = execute_notebook(source, out_path, device, notebook_test_parameters(source) if small else None)
        state = f"FAILED {run.error}" if run.error else "ok"
        out.write(f"notebook {run.name}: {state} ({run.seconds:.1f} s)\n")
        out.flush()
        runs.append(run)
    figures = figure_files(out_path)
    pngs, png_note = export_pngs(figures, out_path / "png")
    out.write(png_note + "\n" if png_note else f"wrote {len(pngs)} PNGs to {out_path / 'png'}\n")
    page = out_path / "index.html"
    atomic_write_text(page, report_html(rows, runs, figures, out_path, device, png_note, table_files(out_path)))
    out.write(f"wrote {page} ({len(figures)} figures, {len(runs)} notebooks)\n")
    return runs


def run_report(out_dir: str, device: str, out: IO[str]) -> None:
    """The command line's ``report``: the whole job; a failed notebook is an error after the page is written."""
    runs = build_report(out_dir, device, out)
    from workbench.repro.page import write_report_findings  # docs/findings.md, regenerated with the report

    out.write(f"wrote {write_report_findings(out_dir)}\n")
    failed = [run for run in runs if run.error]
    if failed:
        names = ", ".join(run.name for run in failed)
        raise ReportError(f"{len(failed)} of {len(runs)} notebooks failed ({names}); see {Path(out_dir) / 'index.html'}")


class ReportError(RuntimeError):
    """The report was written but a notebook failed (the command line prints it and exits non-zero)."""
