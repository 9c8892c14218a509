"""The committed ``docs/findings.md`` is the page the data in this checkout generates, and
``make report`` leaves it alone (it writes its own copy beside the report)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.repro import page


def test_the_committed_findings_page_is_current() -> None:
    committed = page.PAGE.read_text(encoding="utf-8")
    assert page.current_findings_markdown() == committed, (
        "docs/findings.md is stale: regenerate it with `python -m workbench.repro.page` and commit it")


def test_the_report_writes_its_own_copy_and_not_the_committed_page(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    before = page.PAGE.stat().st_mtime_ns, page.PAGE.read_bytes()
    monkeypatch.setattr(page, "current_findings_markdown", lambda: "# a page\n")
    written = page.write_report_findings(tmp_path / "report")
    assert written == tmp_path / "report" / "findings.md" and written.read_text() == "# a page\n"
    assert (page.PAGE.stat().st_mtime_ns, page.PAGE.read_bytes()) == before
