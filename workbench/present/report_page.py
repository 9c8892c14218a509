"""The design-review page (``index.html``): findings first, then the seeds, then the details, collapsed.

The first screen is the atlas's findings for the release under review (``findings_page``), with
links to the glossary and to the reproduction of every finding (``docs/findings.md``). Then the three
seeds, reproduced. Everything else sits in collapsed sections: notebook 00's table of sizing rules on
the notebooks' grids, each notebook's figures with their captions, and the executed notebooks.

A figure is drawn when its section is opened (its plotly JSON waits in a ``<script>`` tag): a plot
drawn inside a closed section would measure its labels as zero wide. plotly.js is inlined once, so
the page works offline.
"""

from __future__ import annotations

import html
import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

from workbench.present.findings_page import findings_html
from workbench.present.words import NOT_APPLICABLE, WORDS, css_class, css_rules

REPOSITORY = Path(__file__).resolve().parents[2]
DOCS = REPOSITORY / "docs"
ATLAS_SUMMARY = "05_atlas_summary"  # the results file notebook 05 writes (``report.save_results``)


@dataclass(frozen=True)
class NotebookRun:
    """One notebook executed by papermill: where its outputs are, and how it went."""

    name: str  # the file stem, e.g. "01_npu_block_tables"
    executed: Path  # <out>/notebooks/NAME.ipynb (written even when a cell failed)
    html: Path | None  # the executed notebook rendered as HTML
    seconds: float
    error: str | None  # None: every cell ran; else "cell N: Name: message"


STYLE = """
body { font-family: system-ui, sans-serif; margin: 0.8rem auto; padding: 0 0.8rem; max-width: 1400px; color: #222;
  font-size: 14px; }
h1 { font-size: 1.4rem; margin: 0.2rem 0; } h2 { font-size: 1.15rem; margin: 1.2rem 0 0.4rem;
  border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 0.15rem 0.45rem; border: 1px solid #ddd; text-align: left; }
th { background: #f4f4f4; } .failed { color: #b00020; font-weight: 600; }
table.findings { font-size: 11.5px; } table.findings td { white-space: nowrap; padding: 0.1rem 0.3rem; }
table.findings th { font-size: 11px; padding: 0.1rem 0.3rem; }
.lede, .counts { margin: 0.3rem 0; } .badge { padding: 0 0.35rem; border-radius: 3px; }
.figure { margin: 1rem 0 2rem; } .note { color: #555; font-style: italic; } .caption { color: #333; margin: 0.2rem 0 0.6rem; }
details { margin: 0.5rem 0; } summary { cursor: pointer; font-weight: 600; font-size: 1.05rem; }
table.verdict { margin-bottom: 1rem; font-size: 13px; }
"""

LAZY_FIGURES = """
function drawFigures(section) {
  section.querySelectorAll('div.lazy-figure').forEach(div => {
    if (div.classList.contains('js-plotly-plot')) return;
    const spec = JSON.parse(document.getElementById('data-' + div.id).textContent);
    Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false});
  });
}
document.querySelectorAll('details').forEach(d => d.addEventListener('toggle', () => { if (d.open) drawFigures(d); }));
document.querySelectorAll('details[open]').forEach(drawFigures);
"""

VERDICT_INTRO = (
    "Notebook 00's sweeps over the grids of notebooks 01-03: sizing rules, not releases. Each cell: "
    "<b>no reachable failure</b> (no committed length up to what a run reaches, <code>ctx - 1 + overshoot</code>, "
    "fails in any configuration swept; lengths past it are not searched here, the atlas searches them), "
    "<b>fails loudly at s = N</b> (a step raises; N is the first failing committed length of the configuration "
    "that fails earliest past its context, with that configuration: ctx, page size ps, draft tokens D and the request "
    "table's width generation g1 / g3) or <b>fails silently</b> (nothing raises, a kernel would read past the table or "
    "the free list), and how many of the configurations swept fail. "
    "Which rule a release ships, and what a real run of it meets, is the findings table above."
)


def docs_link(out_dir: Path, page: str, anchor: str = "") -> str:
    """A relative link from the report's folder to a page of the repository's ``docs/``."""
    target = os.path.relpath(DOCS / page, out_dir.resolve())
    return Path(target).as_posix() + (f"#{anchor}" if anchor else "")


def links_html(out_dir: Path) -> str:
    glossary = docs_link(out_dir, "glossary.md")
    return (f'Words: <a id="glossary-link" href="{html.escape(glossary)}">glossary</a> '
            f'(<a href="{html.escape(docs_link(out_dir, "glossary.md", "reach"))}">reach</a>, '
            f'<a href="{html.escape(docs_link(out_dir, "glossary.md", "margin"))}">margin</a>, '
            f'<a href="{html.escape(docs_link(out_dir, "glossary.md", "seed"))}">seed</a>). '
            f'Every finding, reproduced step by step: <a id="findings-link" '
            f'href="{html.escape(docs_link(out_dir, "findings.md"))}">docs/findings.md</a>.')


def load_results(out_dir: Path, name: str) -> pd.DataFrame | None:
    """A results file a notebook wrote (``<out>/results/NAME.json``), or None when it wrote none."""
    path = out_dir / "results" / f"{name}.json"
    return pd.DataFrame(json.loads(path.read_text())) if path.is_file() else None


# ---- sections ----------------------------------------------------------------------------------


def seed_table_html(cells: Sequence[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("seed", "fix", "rule / gather", "outcome", "boundary", "detail"))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in cells)
    return f'<table id="seeds"><tr>{head}</tr>{body}</table>'


def notebook_list_html(runs: Sequence[NotebookRun], out_dir: Path) -> str:
    items = []
    for run in runs:
        target = run.html or run.executed
        link = f'<a href="{html.escape(target.relative_to(out_dir).as_posix())}">{html.escape(run.name)}</a>'
        status = f'<span class="failed">failed: {html.escape(run.error)}</span>' if run.error else "every cell ran"
        items.append(f"<li>{link} ({run.seconds:.1f} s): {status}</li>")
    return '<ul id="notebooks">' + "".join(items) + "</ul>"


def verdict_class(cell: str) -> str:
    """The CSS class of a verdict cell: the word it starts with (longest first, so "fails silently"
    is not read as another word)."""
    for word in sorted((w for w in WORDS if w != NOT_APPLICABLE), key=len, reverse=True):
        if cell.startswith(word):
            return css_class(word)
    return ""


def tables_html(tables: Sequence[Path]) -> str:
    parts = []
    for path in tables:
        data = json.loads(path.read_text())
        head = "".join(f"<th>{html.escape(c)}</th>" for c in data["columns"])
        body = "".join("<tr>" + "".join(f'<td class="{verdict_class(cell)}">{html.escape(cell)}</td>' for cell in row)
                       + "</tr>" for row in data["rows"])
        parts.append(f'<table class="verdict" id="table-{html.escape(path.stem)}"><tr>{head}</tr>{body}</table>')
    return "".join(parts) or '<p class="note">No verdict table: notebook 00 did not run.</p>'


def _figure_html(path: Path) -> str:
    spec = json.loads(path.read_text())
    meta = spec.get("layout", {}).get("meta")
    caption = meta.get("caption", "") if isinstance(meta, dict) else ""
    data = json.dumps({"data": spec.get("data", []), "layout": spec.get("layout", {})}).replace("</", "<\\/")
    return (f'<section class="figure"><h3>{html.escape(path.stem)}</h3><p class="caption">{html.escape(caption)}</p>'
            f'<div class="lazy-figure" id="fig-{html.escape(path.stem)}"></div>'
            f'<script type="application/json" id="data-fig-{html.escape(path.stem)}">{data}</script></section>')


def figures_html(figures: Sequence[Path], png_note: str | None) -> str:
    """One collapsed section per notebook, holding its figures."""
    note = f'<p class="note" id="png-note">{html.escape(png_note)}</p>' if png_note else ""
    parts = []
    for prefix, group in itertools.groupby(figures, key=lambda p: p.stem[:2]):
        shown = list(group)
        parts.append(f'<details class="figures" id="figures-{html.escape(prefix)}"><summary>Notebook {html.escape(prefix)}: '
                     f'{len(shown)} figure{"s" if len(shown) != 1 else ""}</summary>'
                     + "".join(_figure_html(p) for p in shown) + "</details>")
    return note + "".join(parts)


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

    return str(get_plotlyjs())


def report_html(
    seed_cells: Sequence[tuple[str, ...]], runs: Sequence[NotebookRun], figures: Sequence[Path], out_dir: Path,
    device: str, png_note: str | None, tables: Sequence[Path] = (),
) -> str:
    summary = load_results(out_dir, ATLAS_SUMMARY)
    failed = [run.name for run in runs if run.error]
    failed_line = (f'<p class="failed">{len(failed)} notebook(s) failed: {html.escape(", ".join(failed))}; '
                   "see the executed notebooks below.</p>") if failed else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>workbench design review</title>"
        f"<style>{STYLE}{css_rules()}</style><script>{_plotly_js()}</script></head><body>"
        "<h1>workbench: can a real run of the graph-captured decode step fail?</h1>"
        f'<p class="lede">Device: <code>{html.escape(device)}</code>. Every number on this page comes from executed '
        f"torch steps and the engines' own rules, release by release.</p>{failed_line}"
        f"{findings_html(summary, links_html(out_dir))}"
        f"<h2>Seeds: the three real crashes, reproduced before and after their fixes</h2>{seed_table_html(seed_cells)}"
        '<h2>Details</h2><details id="details-rules"><summary>Sizing rules on the notebooks\' grids (notebook 00)'
        f'</summary><p class="note">{VERDICT_INTRO}</p>{tables_html(tables)}</details>'
        f"{figures_html(figures, png_note)}"
        f'<details id="details-notebooks"><summary>Executed notebooks ({len(runs)})</summary>'
        f"{notebook_list_html(runs, out_dir)}</details>"
        f"<script>{LAZY_FIGURES}</script></body></html>\n"
    )
