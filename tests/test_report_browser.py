"""The design-review report, opened in a real headless Chromium.

The report is built the way ``make report`` builds it (every notebook through papermill, here
with each notebook's small test parameters), then Debian's ``chromium`` loads ``index.html`` from
disk with every network request refused: the first screen (1024 x 900) must show the findings of
the release under review, loud and silent, each with its conditions and fix; once every collapsed
section is opened each figure must have drawn its SVG, and the console must show no error. Without
Chromium or playwright the test is skipped with a message saying how to enable it; no browser is
ever downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from browser import CHROMIUM_ARGS, chromium_or_skip

from workbench.atlas.findings import row_latent
from workbench.present.report import NO_CHROMIUM, NOTEBOOKS_DIR, export_pngs, find_chromium


@pytest.fixture(scope="module")
def report_dir(small_report: tuple[Path, list[Any], str]) -> Path:
    """The session's small report (``conftest.small_report``, shared with ``test_notebooks``)."""
    chromium_or_skip()
    out, runs, log = small_report
    assert runs and all(run.error is None for run in runs), log
    return out


def test_every_figure_renders_without_console_errors(report_dir: Path) -> None:
    from playwright.sync_api import sync_playwright

    figures = sorted(path.stem for path in (report_dir / "figures").glob("*.json"))
    assert figures, "the notebooks wrote no figures"
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            def refuse_network(route: object) -> None:  # the page must not need the network
                url = route.request.url  # type: ignore[attr-defined]
                if url.startswith("file:"):
                    route.continue_()  # type: ignore[attr-defined]
                else:
                    requests.append(url)
                    route.abort()  # type: ignore[attr-defined]

            page.route("**/*", refuse_network)
            page.goto((report_dir / "index.html").as_uri(), wait_until="load")
            page.evaluate(OPEN_DETAILS)
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(figures)}", timeout=30_000
            )
            drawn = page.evaluate(
                "Array.from(document.querySelectorAll('.js-plotly-plot'))"
                ".filter(d => d.querySelector('.main-svg') && d.getBoundingClientRect().height > 100)"
                ".map(d => d.id)"
            )
            links = page.evaluate("Array.from(document.querySelectorAll('#notebooks a')).map(a => a.getAttribute('href'))")
        finally:
            browser.close()
    assert sorted(drawn) == [f"fig-{name}" for name in figures]
    assert errors == []
    assert requests == []
    notebooks = sorted(path.name for path in NOTEBOOKS_DIR.glob("*.ipynb"))
    assert [Path(link).with_suffix(".ipynb").name for link in links] == notebooks
    assert all((report_dir / link).is_file() for link in links)


OPEN_DETAILS = "document.querySelectorAll('details').forEach(d => { d.open = true; })"  # figures draw when opened

# The findings block of the selected release as the first screen shows it: its box, and per row the
# cells' text, the mode lines, the badge's class and colour, and how far right the row reaches.
FIRST_SCREEN = """() => {
  const block = Array.from(document.querySelectorAll('#findings .release')).find(b => !b.hidden);
  if (!block) return null;
  const box = block.getBoundingClientRect();
  const rows = Array.from(block.querySelectorAll('tr.finding')).map(tr => {
    const cells = Array.from(tr.children);
    const badge = cells[1].querySelector('.badge');
    return {cells: cells.map(c => c.innerText), modes: cells[0].querySelectorAll('.sub').length,
            how: badge.className.replace('badge ', ''), colour: getComputedStyle(badge).backgroundColor,
            top: tr.getBoundingClientRect().top,
            right: Math.max(...cells.map(c => c.getBoundingClientRect().right))};
  });
  const links = Array.from(document.querySelectorAll('#findings a')).map(a => a.getAttribute('href'));
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id);
  return {release: block.dataset.release, rows, links, ids, scrollWidth: document.documentElement.scrollWidth,
          selected: document.getElementById('release-select').value};
}"""
FIRST_SCREEN_PX = (1024, 900)  # the narrowest window a design review reads the page in


def check_first_screen(shown: dict[str, Any], reachable: int, release: str) -> None:
    """At 1024 x 900: the release under review's findings, every backend and mode a run breaks once
    (a row per backend, a line per mode), loud and silent in their two colours, nothing cut off at
    the right, the table starting on the first screen, and each column head linked to the page's glossary."""
    width, height = FIRST_SCREEN_PX
    assert shown is not None and shown["release"] == release == shown["selected"]
    assert sum(row["modes"] for row in shown["rows"]) == reachable > 0
    assert shown["rows"][0]["top"] < height, "the findings start below the first screen"
    assert all(row["right"] <= width for row in shown["rows"]) and shown["scrollWidth"] <= width, "a column is cut off"
    classes = {row["how"]: row["colour"] for row in shown["rows"]}
    assert set(classes) == {"v-fails-loudly", "v-fails-silently"}, classes  # the small atlas has both
    assert classes["v-fails-loudly"] != classes["v-fails-silently"]
    for row in shown["rows"]:
        where, how, when, fix, fixed_in = row["cells"]
        assert how.startswith(("fails loudly ", "fails silently ")) and "from " in where and "reaches " in where
        assert "context " in when and "costs " in fix and " of the KV pool" in fix, row
        assert fixed_in.startswith(("unfixed (as of ", "sglang ")), row
    heads = [link for link in shown["links"] if link.startswith("#g-")]
    assert heads and all(link[1:] in shown["ids"] for link in heads)
    assert any(link.endswith("glossary.md") for link in shown["links"])
    assert not any(link.startswith("..") for link in shown["links"]), "a link leaves the report's folder"


def test_the_first_screen_shows_the_newest_releases_findings(report_dir: Path) -> None:
    """At 1024 x 900: every reachable finding of the newest SGLang release, loud and silent in their
    two colours, each with its lengths, setting, fix, cost and the release that fixed it; the
    glossary linked; another release one click away."""
    from playwright.sync_api import sync_playwright

    summary = json.loads((report_dir / "results" / "05_atlas_summary.json").read_text())
    newest = max((r["engine"] for r in summary if r["engine"].startswith("sglang==") and "+" not in r["engine"]),
                 key=lambda e: tuple(int(n) for n in e.split("==")[1].split(".")))
    reachable = [r for r in summary if r["engine"] == newest and r["status"] == "reachable"
                 and not row_latent(pd.Series(r))]  # a latent row (no released setting runs its step) is listed apart
    width, height = FIRST_SCREEN_PX
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto((report_dir / "index.html").as_uri(), wait_until="load")
            shown = page.evaluate(FIRST_SCREEN)
            other = next(r["engine"] for r in summary if r["engine"] != newest)
            page.select_option("#release-select", other)
            switched = page.evaluate(FIRST_SCREEN)
        finally:
            browser.close()
    check_first_screen(shown, len(reachable), newest)
    assert switched["release"] == other


# Every drawn text of one figure (titles, tick labels, legend entries, annotations, colour bar, cell
# numbers) as its box on the page, and every axis with its title and whether its tick labels show.
FIGURE_TEXT = """(id) => {
  const gd = document.getElementById(id);
  const boxes = [];
  gd.querySelectorAll('svg text').forEach(t => {
    const text = t.textContent.trim();
    const r = t.getBoundingClientRect();
    if (!text || r.width === 0 || r.height === 0 || getComputedStyle(t).visibility === 'hidden') return;
    boxes.push({text, left: r.left, top: r.top, right: r.right, bottom: r.bottom});
  });
  const axes = Object.keys(gd._fullLayout).filter(k => /^[xy]axis[0-9]*$/.test(k)).map(k => {
    const a = gd._fullLayout[k];
    return {name: k, shown: a.visible !== false && a.showticklabels !== false, title: (a.title && a.title.text) || ''};
  });
  return {boxes, axes};
}"""
GENERIC_TITLES = {"", "x", "y", "value", "variable", "count", "index"}
TOLERANCE_PX = 1.0  # boxes of neighbouring lines may touch


def overlaps(boxes: list[dict[str, object]]) -> list[tuple[str, str]]:
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            width = min(a["right"], b["right"]) - max(a["left"], b["left"])  # type: ignore[operator]
            height = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])  # type: ignore[operator]
            if width > TOLERANCE_PX and height > TOLERANCE_PX:
                found.append((str(a["text"]), str(b["text"])))
    return found


def test_overlap_check_finds_overlapping_boxes() -> None:
    """The check below can fail: two boxes sharing 4 x 4 px overlap, two that touch do not."""
    a = {"text": "a", "left": 0, "top": 0, "right": 10, "bottom": 10}
    assert overlaps([a, {"text": "b", "left": 6, "top": 6, "right": 20, "bottom": 20}]) == [("a", "b")]
    assert overlaps([a, {"text": "c", "left": 10, "top": 0, "right": 20, "bottom": 10}]) == []


def test_no_figure_has_overlapping_text_or_an_untitled_axis(report_dir: Path) -> None:
    """What a reviewer reads in every figure of the report: no two texts drawn over each other,
    every axis that shows tick labels titled with its quantity (not "y" or "value")."""
    from playwright.sync_api import sync_playwright

    figures = sorted(path.stem for path in (report_dir / "figures").glob("*.json"))
    problems: dict[str, object] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto((report_dir / "index.html").as_uri(), wait_until="load")
            page.evaluate(OPEN_DETAILS)
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(figures)}", timeout=60_000
            )
            for name in figures:
                drawn = page.evaluate(FIGURE_TEXT, f"fig-{name}")
                assert len(drawn["boxes"]) > 3, f"{name}: hardly any text drawn"
                clashes = overlaps(drawn["boxes"])
                untitled = [a["name"] for a in drawn["axes"] if a["shown"] and a["title"].strip().lower() in GENERIC_TITLES]
                if clashes or untitled:
                    problems[name] = {"overlapping": clashes[:6], "untitled axes": untitled}
        finally:
            browser.close()
    assert not problems, problems


def test_pngs_exported_for_every_figure(report_dir: Path) -> None:
    figures = sorted(path.stem for path in (report_dir / "figures").glob("*.json"))
    pngs = sorted(path.stem for path in (report_dir / "png").glob("*.png"))
    assert pngs == figures
    for png in (report_dir / "png").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chromium_lookup_honours_browser_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "chrome"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("BROWSER_PATH", str(fake))
    assert find_chromium() == str(fake)
    monkeypatch.delenv("BROWSER_PATH")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_chromium() is None
    figure = tmp_path / "figures" / "00_x.json"
    figure.parent.mkdir()
    figure.write_text("{}")
    assert export_pngs([figure], tmp_path / "png") == ([], NO_CHROMIUM)
    assert not (tmp_path / "png").exists()


def test_a_figure_the_batch_export_drops_is_exported_again_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Kaleido's batch can return without writing one figure (a loaded machine's browser): that one
    is exported again by itself, and one still missing is named, not claimed."""
    import plotly.graph_objects as go
    import plotly.io as pio

    from workbench.present import report

    monkeypatch.setattr(report, "find_chromium", lambda: "/usr/bin/chromium")
    figures = []
    for name in ("01_a", "02_b", "03_c"):
        path = tmp_path / "figures" / f"{name}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(go.Figure().to_json())
        figures.append(path)
    alone: list[str] = []
    monkeypatch.setattr(pio, "write_images", lambda figs, paths, **_: [Path(p).write_bytes(b"png") for p in paths[::2]])
    monkeypatch.setattr(pio, "write_image", lambda fig, path, **_: (alone.append(Path(path).stem), Path(path).write_bytes(b"png")))
    pngs, note = export_pngs(figures, tmp_path / "png")
    assert alone == ["02_b"] and note is None and [p.stem for p in pngs] == ["01_a", "02_b", "03_c"]
    monkeypatch.setattr(pio, "write_image", lambda fig, path, **_: None)  # the second try writes nothing either
    for png in (tmp_path / "png").glob("*.png"):
        png.unlink()
    pngs, note = export_pngs(figures, tmp_path / "png")
    assert [p.stem for p in pngs] == ["01_a", "03_c"] and note == "PNG export with /usr/bin/chromium wrote no file for 02_b"
