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
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

from workbench import backends
from workbench.present.findings_page import findings_html
from workbench.present.words import DESIGNED_OUTCOMES, NOT_APPLICABLE, SAFE, WORDS, css_class, css_rules, outcome_phrase, outcome_word

REPOSITORY = Path(__file__).resolve().parents[2]
DOCS = REPOSITORY / "docs"
DOCS_FOLDER = "docs"  # where the page's docs travel with it, inside the report folder
FINDINGS_PAGE = "findings.md"  # every finding reproduced (``workbench.repro.page``), beside the page
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
table.findings { font-size: 11.5px; width: 100%; table-layout: fixed; }
table.findings td { padding: 0.1rem 0.3rem; vertical-align: top; overflow-wrap: anywhere; line-height: 1.25; }
table.findings th { font-size: 11px; padding: 0.1rem 0.3rem; }
table.findings th:nth-child(1) { width: 25%; } table.findings th:nth-child(2) { width: 17%; }
table.findings th:nth-child(3) { width: 23%; } table.findings th:nth-child(4) { width: 22%; }
table.findings th:nth-child(5) { width: 13%; }
table.findings th a { color: inherit; text-decoration: underline dotted; } .sub { color: #555; }
table.findings .how .sub { color: #333; } .badge { white-space: nowrap; }
dl.glossary { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 0.8rem; font-size: 12.5px; }
dl.glossary dt { font-weight: 600; } dl.glossary dd { margin: 0; }
dl.glossary dt:target, dl.glossary dt:target + dd { background: #fff3c4; }
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


def bundle_docs(out_dir: Path) -> None:
    """Copy the repository's ``docs/`` pages (and their images) into ``<out>/docs/``, and
    ``docs/findings.md`` beside the page as ``<out>/findings.md`` unless the report wrote its own
    there: the page links only files inside its folder, so it works when the folder is shared alone."""
    target = out_dir / DOCS_FOLDER
    target.mkdir(parents=True, exist_ok=True)
    for page in sorted(DOCS.glob("*")):
        if page.is_file() and page.suffix in (".md", ".png"):
            shutil.copyfile(page, target / page.name)
    if not (out_dir / FINDINGS_PAGE).is_file() and (DOCS / FINDINGS_PAGE).is_file():
        shutil.copyfile(DOCS / FINDINGS_PAGE, out_dir / FINDINGS_PAGE)


def docs_link(page: str, anchor: str = "") -> str:
    """A relative link from the report's page to a docs page copied beside it (``bundle_docs``)."""
    return f"{DOCS_FOLDER}/{page}" + (f"#{anchor}" if anchor else "")


def links_html() -> str:
    glossary = docs_link("glossary.md")
    return (f'Words: <a href="#glossary">on this page</a>, the full <a id="glossary-link" '
            f'href="{html.escape(glossary)}">glossary</a>. '
            f'Every finding, reproduced step by step: <a id="findings-link" '
            f'href="{FINDINGS_PAGE}">findings.md</a>.')


def load_results(out_dir: Path, name: str) -> pd.DataFrame | None:
    """A results file a notebook wrote (``<out>/results/NAME.json``), or None when it wrote none."""
    path = out_dir / "results" / f"{name}.json"
    return pd.DataFrame(json.loads(path.read_text())) if path.is_file() else None


# ---- sections ----------------------------------------------------------------------------------


SEED_HEADS = ("seed (backend)", "side of the fix", "rule / gather", "what happens", "fails from length", "detail")


def seed_name(seed: str) -> str:
    """A seed's backend by its registry name (a legacy alias becomes the name the registry gives the
    backend); the allocator, no table backend, keeps its own."""
    return backends.backend_of(seed).name if backends.is_table_backend(seed) else seed


def seed_word(outcome: str, boundary: str) -> str:
    """A seed row's word: no failing length at all is safe; else the outcome's word (``words.outcome_word``)."""
    return SAFE if boundary == "none" and outcome in DESIGNED_OUTCOMES else outcome_word(outcome)


def seed_table_html(cells: Sequence[tuple[str, ...]]) -> str:
    """The seeds' rows (``report._seed_cells``: seed, fix, rule, outcome, boundary, detail) in the
    findings' words and colours."""
    head = "".join(f"<th>{h}</th>" for h in SEED_HEADS)
    body = []
    for seed, fix, rule, outcome, boundary, detail in cells:
        word = seed_word(outcome, boundary)
        tds = (f"<td>{html.escape(seed_name(seed))}</td><td>{html.escape(fix)}</td><td>{html.escape(rule)}</td>"
               f'<td class="{css_class(word)}">{html.escape(word)}: {html.escape(outcome_phrase(outcome))}</td>'
               f"<td>{html.escape(boundary)}</td><td>{html.escape(detail)}</td>")
        body.append(f"<tr>{tds}</tr>")
    return f'<table id="seeds"><tr>{head}</tr>{"".join(body)}</table>'


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
    """The page's HTML; copies the docs it links into ``out_dir`` (``bundle_docs``)."""
    bundle_docs(out_dir)
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
        f"{findings_html(summary, links_html())}"
        f"<h2>Seeds: the three real crashes, reproduced before and after their fixes</h2>{seed_table_html(seed_cells)}"
        '<h2>Details</h2><details id="details-rules"><summary>Sizing rules on the notebooks\' grids (notebook 00)'
        f'</summary><p class="note">{VERDICT_INTRO}</p>{tables_html(tables)}</details>'
        f"{figures_html(figures, png_note)}"
        f'<details id="details-notebooks"><summary>Executed notebooks ({len(runs)})</summary>'
        f"{notebook_list_html(runs, out_dir)}</details>"
        f"<script>{LAZY_FIGURES}</script></body></html>\n"
    )
