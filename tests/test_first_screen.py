"""The report's first screen, from a small atlas summary built here: what a reviewer acts on.

Expected values are worked here from the frame, never read back from the page's code: the release
that fixed a finding is the first later release of the same engine whose row no longer fails (a
release that refuses the setting at start-up fixes nothing), in the package index's order
(``0.5.1.post3`` after ``0.5.1``); a cost's percentage is computed from its bytes; the selector
groups releases by engine in version order; and every link of the page stays inside its folder.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from workbench.atlas.findings import findings
from workbench.present.findings_page import FINDINGS_COLUMNS, cost_words, finding_cells, findings_html, fixed_in_words, share_text
from workbench.present.report_page import report_html, seed_table_html
from workbench.present.words import GLOSSARY

PAGE_TABLE = "sglang-fa3-page-table"
BLOCK_TABLES = "sglang-ascend-block-tables"


def _row(engine: str, backend: str, status: str, *, outcome: str = "silent-overread", mode: str = "target-verify",
         extra: int = 256, kv: float = 2.748779e11) -> dict[str, object]:
    failing = status in ("reachable", "unreachable")
    return {"engine": engine, "backend": backend, "mode": mode, "rule": "context", "status": status,
            "outcome": outcome if failing else "ok", "preset": "QwQ-32B", "recipe": "ngram-16", "context_len": 32768,
            "page_size": 64, "draft_tokens": 16, "max_bs": 32, "request_table_width": 32863, "buffer_unit": "pages",
            "buffer_width": 512, "first_failing_seq_len": 32753 if failing else None,
            "reachable_len": 32769, "margin": -17 if status == "reachable" else 40 if failing else None,
            "extra_bytes": extra, "kv_budget_bytes": kv, "extra_share_of_kv": extra / kv, "run_confirmed": True}


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    """The page table: fails through 0.5.1, is safe from 0.5.1.post3 (listed after 0.5.1, before 0.5.2).
    The block tables: fail in 0.5.1, are refused at start-up in 0.5.1.post3 (no run: no fix), fail
    in 0.5.2 and are safe from 0.5.3; a second mode fails loudly up to the newest, 0.5.3.
    A vLLM row and the crash report's case (an engine with no version) round off the selector."""
    rows = [_row("sglang==0.5.1", PAGE_TABLE, "reachable"), _row("sglang==0.5.1.post3", PAGE_TABLE, "safe"),
            _row("sglang==0.5.2", PAGE_TABLE, "safe"), _row("sglang==0.5.10", PAGE_TABLE, "safe"),
            _row("sglang==0.5.1", BLOCK_TABLES, "reachable"), _row("sglang==0.5.1.post3", BLOCK_TABLES, "refused"),
            _row("sglang==0.5.2", BLOCK_TABLES, "reachable"), _row("sglang==0.5.3", BLOCK_TABLES, "safe"),
            _row("sglang==0.5.10", BLOCK_TABLES, "safe"),
            *(_row(e, BLOCK_TABLES, "reachable", outcome="shape-error", mode="decode", extra=5 * 2**20, kv=2**30)
              for e in ("sglang==0.5.1", "sglang==0.5.3", "sglang==0.5.10")),
            _row("vllm==0.10.1.1", "vllm-v0-block-table", "reachable"), _row("vllm==0.9.2", "vllm-v0-block-table", "safe"),
            _row("vllm-ascend", "vllm-ascend-block-table", "reachable")]
    return pd.DataFrame(rows)


def _finding(summary: pd.DataFrame, release: str, backend: str, mode: str = "target-verify") -> object:
    """The finding of that row; a decode row of this speculative summary is latent (no deployment of its
    recipe replays the plain decode graph), and the page's words for it are the same."""
    found = [*findings(summary, [release]), *findings(summary, [release], latent=True)]
    return next(f for f in found if f.backend == backend and f.mode == mode)


def test_fixed_in_is_the_first_later_release_that_no_longer_fails(summary: pd.DataFrame) -> None:
    page_table = _finding(summary, "sglang==0.5.1", PAGE_TABLE)
    assert fixed_in_words(page_table, summary) == "sglang 0.5.1.post3"  # a .post release after its base
    blocks = _finding(summary, "sglang==0.5.1", BLOCK_TABLES)
    assert fixed_in_words(blocks, summary) == "sglang 0.5.3"  # refused at start-up fixes nothing; 0.5.2 fails


def test_an_unfixed_finding_says_as_of_which_release(summary: pd.DataFrame) -> None:
    loud = _finding(summary, "sglang==0.5.1", BLOCK_TABLES, mode="decode")
    assert fixed_in_words(loud, summary) == "unfixed (as of sglang 0.5.10)"  # 0.5.10 after 0.5.3, not before it


@pytest.mark.parametrize(("extra", "kv", "expected"), [
    (256, 2.748779e11, "under 0.001 %"),  # 9.3e-08 %
    (5 * 2**20, 2**30, "0.49 %"),  # 0.48828125 %: two significant digits
    (3 * 2**30, 4 * 2**30, "75 %"),
    (3_000, 2.748779e08, "0.001 %"),  # 0.00109 %: never finer than 0.001 %
])
def test_a_share_of_the_kv_pool_reads_in_plain_percent(extra: int, kv: float, expected: str) -> None:
    percent = extra / kv * 100
    assert not re.search(r"\de[-+]?\d", share_text(extra / kv)) and share_text(extra / kv) == expected, percent


def test_the_cost_is_per_request_slot_and_a_share_of_the_kv_pool(summary: pd.DataFrame) -> None:
    row = summary[(summary.engine == "sglang==0.5.1") & (summary.backend == PAGE_TABLE)].iloc[0]
    finding = _finding(summary, "sglang==0.5.1", PAGE_TABLE)
    assert cost_words(finding, row) == f"+{256 // 32} B per request slot, under 0.001 % of the KV pool"
    loud = summary[(summary.engine == "sglang==0.5.1") & (summary["mode"] == "decode")].iloc[0]
    per_slot_kib = 5 * 1024 / 32  # 5 MiB over 32 slots: 160 KiB
    assert cost_words(_finding(summary, "sglang==0.5.1", BLOCK_TABLES, "decode"), loud) == \
        f"+{per_slot_kib:.1f} KiB per request slot, 0.49 % of the KV pool"


def test_the_cells_say_the_condition_and_fix_in_words(summary: pd.DataFrame) -> None:
    row = summary[(summary.engine == "sglang==0.5.1") & (summary.backend == PAGE_TABLE)].iloc[0]
    cells = dict(zip(FINDINGS_COLUMNS, finding_cells(_finding(summary, "sglang==0.5.1", PAGE_TABLE), row, summary)))
    assert cells["what happens"] == "fails silently: a kernel reads past the buffer (silent-overread)"
    assert cells["when"] == "QwQ-32B, NGRAM speculation, context 32,768, page size 64, 16 draft tokens"
    assert "32,863 tokens" in cells["fix and its cost"] and "512 pages" in cells["fix and its cost"]
    assert cells["fixed in"] == "sglang 0.5.1.post3; reproduced: yes"
    # no term the issue found unexplained: "run again", "own", "ps 1", "D 6", "pool 524,224"
    assert not re.search(r"\bps \d|\bD \d|\bpool \d|run again|\bown\b", " ".join(cells.values()))


class _Page(HTMLParser):
    """The selector's groups and options, every link, every id."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[tuple[str, list[str]]] = []
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.heads: list[str] = []
        self._in_th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "optgroup":
            self.groups.append((str(a["label"]), []))
        elif tag == "option":
            self.groups[-1][1].append(str(a["value"]))
        elif tag == "a" and a.get("href"):
            self.links.append(str(a["href"]))
            if self._in_th:
                self.heads.append(str(a["href"]))
        self._in_th = tag == "th" or (self._in_th and tag == "a")


def test_the_selector_groups_releases_by_engine_in_version_order(summary: pd.DataFrame) -> None:
    page = _Page()
    page.feed(findings_html(summary, ""))
    assert page.groups == [
        ("sglang", ["sglang==0.5.1", "sglang==0.5.1.post3", "sglang==0.5.2", "sglang==0.5.3", "sglang==0.5.10"]),
        ("vllm", ["vllm==0.9.2", "vllm==0.10.1.1"]),
        ("vllm-ascend", ["vllm-ascend"]),  # the crash report's case: labelled as such, not as a bare name
    ]
    assert ">vllm-ascend<" not in findings_html(summary, "")


def test_every_column_head_links_to_a_glossary_entry_on_the_page(summary: pd.DataFrame) -> None:
    page = _Page()
    page.feed(findings_html(summary, ""))
    tables = findings_html(summary, "").count('<table class="findings">')
    # a table per release with a finding a deployment runs (a release whose only failing rows are latent,
    # plain decode under a speculative recipe, has none)
    releases = {f.release for f in findings(summary)}
    assert tables == len(releases) >= 2 and len(page.heads) == len(FINDINGS_COLUMNS) * tables
    assert all(head.startswith("#g-") and head[1:] in page.ids for head in page.heads), page.heads
    assert {f"g-{anchor}" for anchor, _, _ in GLOSSARY} <= page.ids


def test_the_page_works_when_its_folder_is_shared_alone(summary: pd.DataFrame, tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    summary.to_json(tmp_path / "results" / "05_atlas_summary.json", orient="records")
    page_html = report_html([], [], [], tmp_path, "cpu", None)
    page = _Page()
    page.feed(page_html)
    assert page.links and not any(link.startswith(("..", "/")) or "://" in link for link in page.links), page.links
    for link in page.links:
        target, _, anchor = link.partition("#")
        assert (not target and anchor in page.ids) or (target and (tmp_path / target).is_file()), link
    assert any(link.endswith("glossary.md") for link in page.links)


def test_the_seed_table_speaks_the_findings_words() -> None:
    table = seed_table_html([("npu-block-table", "before", "context", "shape-error", "32753", "size mismatch"),
                             ("npu-block-table", "after", "context-plus-draft", "ok", "none", "")])
    assert "sglang-ascend-block-tables" in table and ">npu-block-table<" not in table
    assert 'class="v-fails-loudly">fails loudly: the step raises a shape error (shape-error)' in table
    assert 'class="v-safe">safe: ' in table
