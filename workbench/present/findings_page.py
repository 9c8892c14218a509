"""The report's first screen: the atlas's findings, release by release, as HTML.

``findings_html(summary, docs)`` turns the atlas summary (``workbench.atlas.rows.summarize``,
saved by notebook 05) into one block per engine release, through ``workbench.atlas.findings``:
every backend and mode a real run breaks, loud or silent (``workbench.present.words``: the same words
and colours as the atlas figure and the notebooks' tables), at which committed length, under which
conditions, and the fix with its cost. The release under review (the newest SGLang release) is
shown; a selector shows any other. Every number is the summary's; nothing here computes one.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd  # type: ignore[import-untyped]

from workbench.atlas.findings import Finding, findings, past_reach, release_under_review, releases_of
from workbench.present.words import LOUD, PAST_REACH, REFUSED, SAFE, SILENT, css_class

FINDINGS_COLUMNS = ("backend", "mode", "how", "first failing s", "a run reaches", "worst setting", "fixed in",
                    "safe size costs", "run again")
NOT_FIXED = "no later release"
HEADER_TITLES = {
    "how": "fails loudly: the step raises; fails silently: nothing raises, a kernel reads or writes past the buffer",
    "first failing s": "the first committed length whose step fails, in the worst setting",
    "a run reaches": "the longest committed length a run reaches: ctx - 1 plus the overshoot",
    "worst setting": "model preset, speculative recipe (eagle-STEPS-TOPK-D, ngram-D, own), context, page size, drafts, "
                     "batch and KV pool tokens of the setting with the smallest margin",
    "fixed in": "the first later release whose row a run no longer breaks",
    "safe size costs": "bytes a size that holds every length takes over the release's own, and their share of the KV cache",
    "run again": "hit: a seeded serving run (or a batch walk) met the failure where the row says",
}

FINDINGS_SCRIPT = """
document.getElementById('release-select').addEventListener('change', (event) => {
  document.querySelectorAll('#findings .release').forEach(block => {
    block.hidden = block.dataset.release !== event.target.value;
  });
});
"""


def share_text(share: float) -> str:
    """A share of the KV cache as a percentage with two significant digits, never in exponent form
    (1.2e-05 -> "0.0012 %")."""
    percent = share * 100
    if percent == 0:
        return "0 %"
    digits = max(0, 1 - math.floor(math.log10(abs(percent))))
    return f"{percent:.{digits}f} %"


def bytes_text(count: int) -> str:
    """Bytes in the largest binary unit that keeps a number of at least 1 (1,536 -> "1.5 KiB")."""
    value, unit = float(count), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{count:,} B" if unit == "B" else f"{value:.1f} {unit}"


def _condition(label: str, value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        shown = f"{value:,}"
    else:
        shown = str(value)
    return shown if label in ("model", "recipe", "scanned") else f"{label} {shown}"


def conditions_text(finding: Finding) -> str:
    return ", ".join(_condition(label, value) for label, value in finding.conditions.items())


def fixed_in_text(finding: Finding) -> str:
    """The first later release a run no longer breaks there, or that none modelled is."""
    return finding.fixed_in or NOT_FIXED


def cost_text(finding: Finding) -> str:
    """What a safe size takes over the release's own, in the worst setting: bytes and KV share."""
    if finding.extra_bytes is None:
        return "-"
    share = f" ({share_text(finding.extra_share_of_kv)} of KV)" if finding.extra_share_of_kv is not None else ""
    return f"+{bytes_text(finding.extra_bytes)}{share}"


def how_text(finding: Finding) -> str:
    return f"{SILENT if finding.silent else LOUD}: {finding.outcome}"


def _run_again(finding: Finding) -> str:
    return {True: "hit", False: "MISSED", None: "-"}[finding.confirmed]


def finding_cells(finding: Finding) -> tuple[str, ...]:
    """One finding's cells, in ``FINDINGS_COLUMNS`` order, as plain text."""
    return (finding.backend, finding.mode, how_text(finding), f"{finding.first_failing:,}", f"{finding.reachable:,}",
            conditions_text(finding), fixed_in_text(finding), cost_text(finding), _run_again(finding))


def _table(rows: Sequence[Finding]) -> str:
    head = "".join(f'<th title="{html.escape(HEADER_TITLES.get(c, ""))}">{html.escape(c)}</th>' for c in FINDINGS_COLUMNS)
    body = []
    for finding in rows:
        cells = finding_cells(finding)
        word = SILENT if finding.silent else LOUD
        tds = "".join(f'<td class="{css_class(word)}">{html.escape(c)}</td>' if i == 2 else f"<td>{html.escape(c)}</td>"
                      for i, c in enumerate(cells))
        body.append(f'<tr class="finding">{tds}</tr>')
    return f'<table class="findings"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _counts_line(summary: pd.DataFrame, release: str, rows: Sequence[Finding]) -> str:
    loud = sum(not f.silent for f in rows)
    silent = len(rows) - loud
    past = past_reach(summary, release)
    safe = int(((summary["engine"] == release) & (summary["status"] == "safe")).sum())
    refused = int(((summary["engine"] == release) & (summary["status"] == "refused")).sum())
    margins = ""
    if not past.empty:
        margins = f" (margins {int(past['margin'].min()):+,} to {int(past['margin'].max()):+,} tokens)"
    return (f'<p class="counts"><b>{len(rows)}</b> backend and mode pairs a real run breaks: '
            f'<span class="badge {css_class(LOUD)}">{loud} {LOUD}</span> '
            f'<span class="badge {css_class(SILENT)}">{silent} {SILENT}</span>; '
            f'<span class="badge {css_class(PAST_REACH)}">{len(past)} {PAST_REACH}</span>{html.escape(margins)}; '
            f'<span class="badge {css_class(SAFE)}">{safe} {SAFE}</span>'
            + (f'; <span class="badge {css_class(REFUSED)}" title="the release\'s own start-up checks refuse every '
               f'setting of these">{refused} {REFUSED}</span>' if refused else "") + ".</p>")


def _release_block(summary: pd.DataFrame, release: str, shown: bool) -> str:
    rows = findings(summary, [release])
    table = _table(rows) if rows else '<p class="note">No backend and mode of this release fails in a real run.</p>'
    hidden = "" if shown else " hidden"
    return (f'<div class="release" data-release="{html.escape(release)}"{hidden}>'
            f"{_counts_line(summary, release, rows)}{table}</div>")


def findings_html(summary: pd.DataFrame | None, links: str) -> str:
    """The findings section; ``links`` is HTML (the glossary, the reproduction pages) for its head line."""
    if summary is None or summary.empty:
        return ('<section id="findings"><h2>Findings</h2><p class="failed">No atlas results: notebook 05 did not '
                f"run, so there are no findings to show.</p><p>{links}</p></section>")
    under_review = release_under_review(summary)
    releases = releases_of(summary)
    options = "".join(f'<option value="{html.escape(r)}"{" selected" if r == under_review else ""}>{html.escape(r)}'
                      f"{' (newest, under review)' if r == under_review else ''}</option>" for r in releases)
    blocks = "".join(_release_block(summary, r, r == under_review) for r in releases)
    return (
        '<section id="findings"><h2>Findings: what a real run breaks</h2>'
        f'<p class="lede">Release <select id="release-select">{options}</select> {links}</p>'
        f"{blocks}<script>{FINDINGS_SCRIPT}</script></section>"
    )
