"""The report's first screen: the atlas's findings, release by release, as HTML a reviewer acts on.

``findings_html(summary, links)`` turns the atlas summary (``workbench.atlas.rows.summarize``,
saved by notebook 05) into one block per engine release, through ``workbench.atlas.findings``:
every backend a real run breaks, in which modes, loud or silent (``workbench.present.words``: the
same words and colours as every figure and table), from which committed length, under which
conditions (in words), the fix in one line and its cost (bytes per request slot and the share of
the KV pool, rounded for a reader), and the release that fixed it or "unfixed (as of the newest
release the atlas ran)". Findings of one backend that agree in every other cell share one row.
Every column head links to the page's own glossary (``words.GLOSSARY``). The release under review
(the newest SGLang release) is shown; a selector, grouped by engine in release order, shows any other.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd  # type: ignore[import-untyped]

from workbench.atlas.findings import Finding, findings, is_release, past_reach, release_key, release_under_review, releases_of
from workbench.present.words import GLOSSARY, GLOSSARY_TERMS, LOUD, PAST_REACH, REFUSED, SAFE, SILENT, css_class, outcome_phrase

# The first screen's columns: (head, the glossary anchors of the terms it uses, in its words' order);
# ``finding_cells`` gives one text per column.
COLUMNS = (
    ("backend; mode: fails from, a run reaches", ("first-failing", "reach", "committed-length")),
    ("what happens", ("what-happens",)), ("when", ("worst-setting",)), ("fix and its cost", ("fix", "request-slot", "kv-pool")),
    ("fixed in", ("fixed-in", "reproduced")),
)
FINDINGS_COLUMNS = tuple(head for head, _ in COLUMNS)
UNFIXED = "unfixed"
UNDER_PERCENT = 0.001  # shares below this many percent read "under 0.001 %"
_EAGLE = re.compile(r"^eagle-(\d+)-(\d+)-(\d+)$")
_NGRAM = re.compile(r"^ngram-(\d+)$")

FINDINGS_SCRIPT = """
document.getElementById('release-select').addEventListener('change', (event) => {
  document.querySelectorAll('#findings .release').forEach(block => {
    block.hidden = block.dataset.release !== event.target.value;
  });
});
"""


# ---- numbers in words ---------------------------------------------------------------------------


def share_text(share: float) -> str:
    """A share (0.01 is 1 %) as a reader's percentage: "under 0.001 %" below that, else two significant
    digits without an exponent, never more precise than 0.001 % (9.3e-07 -> "under 0.001 %",
    1.23e-05 -> "0.001 %", 0.0123 -> "1.2 %", 0.5 -> "50 %")."""
    percent = share * 100
    if percent == 0:
        return "0 %"
    if abs(percent) < UNDER_PERCENT:
        return f"under {UNDER_PERCENT:g} %"
    digits = min(3, max(0, 1 - math.floor(math.log10(abs(percent)))))
    return f"{percent:.{digits}f} %"


def bytes_text(count: float) -> str:
    """Bytes in the largest binary unit that keeps a number of at least 1 (1,536 -> "1.5 KiB");
    a fraction of a byte below 1 KiB rounds to a whole byte."""
    value, unit = float(count), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{round(count):,} B" if unit == "B" else f"{value:.1f} {unit}"


def release_text(engine: str) -> str:
    """``sglang==0.5.23`` -> ``sglang 0.5.23``."""
    name, _, version = engine.partition("==")
    return f"{name} {version}" if version else name


# ---- one finding's cells ----------------------------------------------------------------------


def recipe_words(recipe: str) -> str:
    """A speculative recipe as words: ``ngram-16`` -> "NGRAM speculation", ``eagle-5-4-8`` -> "EAGLE
    speculation (5 steps, top-k 4)", ``own`` -> "the model's own speculation"; the draft tokens are
    a condition of their own."""
    if (eagle := _EAGLE.match(recipe)) is not None:
        return f"EAGLE speculation ({eagle.group(1)} steps, top-k {eagle.group(2)})"
    if _NGRAM.match(recipe):
        return "NGRAM speculation"
    return {"own": "the model's own speculation", "off": "no speculation"}.get(recipe, recipe)


def _number(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def conditions_words(conditions: dict[str, object]) -> str:
    """The worst setting's conditions (``Finding.conditions``: label -> value) as a phrase."""
    phrases = {
        "model": lambda v: str(v), "recipe": lambda v: recipe_words(str(v)),
        "ctx": lambda v: f"context {_number(v)}", "ps": lambda v: f"page size {_number(v)}",
        "D": lambda v: f"{_number(v)} draft tokens", "batch": lambda v: f"batch of {_number(v)}",
        "pool": lambda v: f"KV pool of {_number(v)} tokens", "scanned": lambda v: f"searched over {v}",
    }
    return ", ".join(phrases.get(label, lambda v, lb=label: f"{lb} {_number(v)}")(value)
                     for label, value in conditions.items())


def _row_value(row: pd.Series | None, column: str) -> object | None:
    if row is None or column not in row.index:
        return None
    value = row[column]
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    plain: object = value.item() if hasattr(value, "item") else value  # numpy's scalars as Python's
    return int(plain) if isinstance(plain, float) and plain.is_integer() else plain


def fix_words(row: pd.Series | None) -> str:
    """The fix as one line: size the buffer to the request table's width (the row's numbers)."""
    width, held, unit = (_row_value(row, c) for c in ("request_table_width", "buffer_width", "buffer_unit"))
    if isinstance(width, int) and isinstance(held, int) and unit:
        return f"hold all {width:,} tokens a request can have (now {held:,} {unit})"
    return "hold every length the request table holds"


def cost_words(finding: Finding, row: pd.Series | None = None) -> str:
    """What the fix costs over the release's own size: bytes per request slot (in all where there
    is no slot count) and the share of the KV pool, as a reader takes them in."""
    if finding.extra_bytes is None:
        return "cost not measured"
    slots = _row_value(row, "max_bs")
    per = (f"+{bytes_text(finding.extra_bytes / slots)} per request slot" if isinstance(slots, int) and slots > 0
           else f"+{bytes_text(finding.extra_bytes)}")
    share = f", {share_text(finding.extra_share_of_kv)} of the KV pool" if finding.extra_share_of_kv is not None else ""
    return per + share


def cost_detail(finding: Finding, row: pd.Series | None = None) -> str:
    """The cost's numbers in full, for the cell's hover: bytes in all, slots, the KV pool's bytes."""
    if finding.extra_bytes is None:
        return ""
    slots, kv = _row_value(row, "max_bs"), _row_value(row, "kv_budget_bytes")
    return (f"{finding.extra_bytes:,} B in all" + (f" over {slots:,} request slots" if isinstance(slots, int) else "")
            + (f"; KV pool {bytes_text(kv)}" if isinstance(kv, (int, float)) else ""))


def newest_known(summary: pd.DataFrame, finding: Finding) -> str:
    """The newest release of the finding's engine with a row for its backend and mode: how far "unfixed" holds."""
    name = finding.release.partition("==")[0]
    same = summary[(summary["backend"] == finding.backend) & (summary["mode"] == finding.mode)]
    engines = [e for e in set(same["engine"]) if is_release(e) and e.partition("==")[0] == name]
    return max(engines, key=release_key) if engines else finding.release


def fixed_in_words(finding: Finding, summary: pd.DataFrame | None = None) -> str:
    """The first later release a run no longer breaks there (``Finding.fixed_in``, from the atlas's
    rows), or "unfixed (as of the newest release the atlas ran there)"."""
    if finding.fixed_in:
        return release_text(finding.fixed_in)
    newest = newest_known(summary, finding) if summary is not None else finding.release
    return f"{UNFIXED} (as of {release_text(newest)})"


def reproduced_words(finding: Finding) -> str:
    return {True: "reproduced: yes", False: "reproduced: NO", None: "not run again"}[finding.confirmed]


def where_words(finding: Finding) -> str:
    """A mode, from which committed length it fails, and how far a run gets there (the column's head
    says "fails from, a run reaches")."""
    return f"{finding.mode}: from {finding.first_failing:,}, reaches {finding.reachable:,}"


def finding_cells(finding: Finding, row: pd.Series | None = None, summary: pd.DataFrame | None = None) -> tuple[str, ...]:
    """One finding's cells, in ``FINDINGS_COLUMNS`` order, as plain text (``row``: its summary row,
    for the fix's numbers; ``summary``: for the newest release an unfixed finding holds to)."""
    word = SILENT if finding.silent else LOUD
    return (f"{finding.backend}; {where_words(finding)}", f"{word}: {outcome_phrase(finding.outcome)}",
            conditions_words(finding.conditions), f"{fix_words(row)}; costs {cost_words(finding, row)}",
            f"{fixed_in_words(finding, summary)}; {reproduced_words(finding)}")


# ---- rows of the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class FindingRow:
    """Findings of one backend and release that agree in every cell but their mode and lengths."""

    backend: str
    modes: tuple[str, ...]  # ``where_words`` of each finding
    word: str
    outcome: str
    when: str
    fix: str
    cost: str
    cost_detail: str
    fixed_in: str
    reproduced: str


def _summary_row(summary: pd.DataFrame, finding: Finding) -> pd.Series | None:
    rows = summary[(summary["engine"] == finding.release) & (summary["backend"] == finding.backend)
                   & (summary["mode"] == finding.mode)]
    return None if rows.empty else rows.iloc[0]


def finding_rows(summary: pd.DataFrame, found: Sequence[Finding]) -> list[FindingRow]:
    """The findings as table rows, in their order; a finding that differs from an earlier one of the
    same backend only in its mode and lengths joins that row."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for finding in found:
        row = _summary_row(summary, finding)
        key = (finding.backend, SILENT if finding.silent else LOUD, outcome_phrase(finding.outcome),
               conditions_words(finding.conditions), fix_words(row), cost_words(finding, row),
               cost_detail(finding, row), fixed_in_words(finding, summary), reproduced_words(finding))
        rows.setdefault(key, []).append(where_words(finding))
    return [FindingRow(key[0], tuple(modes), *key[1:]) for key, modes in rows.items()]


def _head() -> str:
    """The column heads, each linked to the glossary entry of its first term (the full list: its title)."""
    cells = "".join(f'<th title="{html.escape("; ".join(GLOSSARY_TERMS[a] for a in anchors))}">'
                    f'<a href="#g-{anchors[0]}">{html.escape(head)}</a></th>' for head, anchors in COLUMNS)
    return f"<thead><tr>{cells}</tr></thead>"


def _row_html(row: FindingRow) -> str:
    e = html.escape
    modes = "".join(f'<br><span class="sub">{e(m)}</span>' for m in row.modes)
    return (
        '<tr class="finding">'
        f'<td class="where"><b>{e(row.backend)}</b>{modes}</td>'
        f'<td class="how"><span class="badge {css_class(row.word)}">{e(row.word)}</span> {e(row.outcome)}</td>'
        f"<td>{e(row.when)}</td>"
        f'<td>{e(row.fix)}<br><span class="sub" title="{e(row.cost_detail)}">costs {e(row.cost)}</span></td>'
        f'<td>{e(row.fixed_in)}<br><span class="sub">{e(row.reproduced)}</span></td></tr>'
    )


def _table(rows: Sequence[FindingRow]) -> str:
    return f'<table class="findings">{_head()}<tbody>{"".join(_row_html(r) for r in rows)}</tbody></table>'


def _counts_line(summary: pd.DataFrame, release: str, found: Sequence[Finding]) -> str:
    loud = sum(not f.silent for f in found)
    silent = len(found) - loud
    past = past_reach(summary, release)
    safe = int(((summary["engine"] == release) & (summary["status"] == "safe")).sum())
    refused = int(((summary["engine"] == release) & (summary["status"] == "refused")).sum())
    margins = ""
    if not past.empty:
        margins = (f' (<a href="#g-margin">margins</a> {int(past["margin"].min()):+,} to '
                   f'{int(past["margin"].max()):+,} tokens)')
    return (f'<p class="counts"><b>{len(found)}</b> backend and mode pairs a real run breaks: '
            f'<span class="badge {css_class(LOUD)}">{loud} {LOUD}</span> '
            f'<span class="badge {css_class(SILENT)}">{silent} {SILENT}</span>; '
            f'<span class="badge {css_class(PAST_REACH)}">{len(past)} {PAST_REACH}</span>{margins}; '
            f'<span class="badge {css_class(SAFE)}">{safe} {SAFE}</span>'
            + (f'; <span class="badge {css_class(REFUSED)}" title="the release\'s own start-up checks refuse every '
               f'setting of these">{refused} {REFUSED}</span>' if refused else "") + ".</p>")


def _release_block(summary: pd.DataFrame, release: str, shown: bool) -> str:
    found = findings(summary, [release])
    table = (_table(finding_rows(summary, found)) if found
             else '<p class="note">No backend and mode of this release fails in a real run.</p>')
    hidden = "" if shown else " hidden"
    return (f'<div class="release" data-release="{html.escape(release)}"{hidden}>'
            f"{_counts_line(summary, release, found)}{table}</div>")


# ---- the selector and the glossary ----------------------------------------------------------------


def option_label(engine: str) -> str:
    """An entry of the selector: the version alone (its engine names the group); an engine's row
    without a version is the public crash report's own case."""
    version = engine.partition("==")[2]
    return version or "the crash report's case (no release named)"


def release_groups(summary: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """(engine name, its versions oldest first) for the selector, engines by name."""
    groups: dict[str, list[str]] = {}
    for engine in releases_of(summary):  # in ``release_key`` order: engines by name, versions in index order
        groups.setdefault(engine.partition("==")[0], []).append(engine)
    return list(groups.items())


def selector_html(summary: pd.DataFrame, selected: str) -> str:
    groups = []
    for name, engines in release_groups(summary):
        options = "".join(
            f'<option value="{html.escape(e)}"{" selected" if e == selected else ""}>{html.escape(option_label(e))}'
            f"{' (newest, under review)' if e == selected else ''}</option>" for e in engines)
        groups.append(f'<optgroup label="{html.escape(name)}">{options}</optgroup>')
    return f'<select id="release-select">{"".join(groups)}</select>'


def glossary_html() -> str:
    """The page's own glossary: one entry per term the first screen uses, each an anchor its heads link to."""
    items = "".join(f'<dt id="g-{html.escape(anchor)}">{html.escape(term)}</dt><dd>{html.escape(meaning)}</dd>'
                    for anchor, term, meaning in GLOSSARY)
    return f'<details id="glossary" open><summary>Words on this page</summary><dl class="glossary">{items}</dl></details>'


def findings_html(summary: pd.DataFrame | None, links: str) -> str:
    """The findings section; ``links`` is HTML (the glossary, the reproduction pages) for its head line."""
    if summary is None or summary.empty:
        return ('<section id="findings"><h2>Findings</h2><p class="failed">No atlas results: notebook 05 did not '
                f"run, so there are no findings to show.</p><p>{links}</p></section>")
    under_review = release_under_review(summary)
    blocks = "".join(_release_block(summary, r, r == under_review) for r in releases_of(summary))
    return (
        '<section id="findings"><h2>Findings: what a real run breaks, and the fix</h2>'
        f'<p class="lede">Release {selector_html(summary, under_review)} {links}</p>'
        f"{blocks}{glossary_html()}<script>{FINDINGS_SCRIPT}</script></section>"
    )
