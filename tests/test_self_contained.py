"""The repository stands on its own: nothing cites a document outside it, and its links resolve.

Three checks over the tracked files (``git ls-files``; a walk of the tree where git is absent):

* no text file cites a document that is not in the repository: the reference notes the project
  was started from, by name or by section number, or a path that leaves the checkout;
* every relative link in ``README.md``, ``docs/*.md`` and the notebooks' markdown names a file that
  exists inside the repository, and a ``#anchor`` into a markdown file names a heading of it (its
  GitHub slug) or an explicit ``<a id=...>``;
* the README links every page of ``docs/`` and ``docs/README.md`` lists every page; every notebook
  and the report link the glossary;
* the README is a front page, at most ``README_MAX_LINES`` lines: everything else is in ``docs/``.

The pages of ``docs/`` are found on disk (``docs/*.md``), not only as git tracks them, so that a page
just written is checked before it is committed.

``AWAITING_NOTEBOOK_OWNER`` lists the files another branch is rewriting (the notebooks and the
report): they are excused from the first and third checks until that branch lands, and an entry
that no longer needs the excuse fails, so the set is emptied on merge.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# docs/README.md (the index) first, then every other page of docs/
DOCS = ("docs/README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"))
README_MAX_LINES = 250  # issue 41: the README is a front page
GLOSSARY = ROOT / "docs" / "glossary.md"
REPORT_SOURCE = "workbench/present/report.py"

# Files still citing outside documents or not yet linking the glossary, owned by the branch that
# rewrites the notebooks and the report. The lead empties this set when that branch is merged.
AWAITING_NOTEBOOK_OWNER: frozenset[str] = frozenset()  # emptied: the notebooks and the report cite docs/

# What citing an outside document looks like. Each pattern is written so that this file's own text
# does not match it ("[.]" where the citation has "."), so the file needs no exception of its own.
# Words may be split across lines and comment markers ("(spec\n# section 1)"): GAP allows both.
GAP = r"[\s#]+"
OUTSIDE_CITATIONS = {
    "the engine-facts notes by file name": r"\bengines[.]md\b",
    "the semantics notes by file name": r"\bspec[.]md\b",
    "the style notes by file name": r"\bstyle[.]md\b",
    "a section of the semantics notes": rf"\bspec{GAP}sections?\b",
    "the semantics notes as a document": rf"\bthe{GAP}spec\b",
    "the semantics notes' possessive": r"\bspec(?:'|\u2019)s\b",
    "a comment opening with the notes' name": r"#\s*spec\b(?![-_])",
    "the shared folder beside the checkout": r"[.][.]/shared\b",
    "a machine path of the shared folder": r"/work[/]shared\b",
    "the shared folder's files": r"\bshared/(?:seeds|spec|engines|style)\b",
}
CITATION = re.compile("|".join(f"(?:{p})" for p in OUTSIDE_CITATIONS.values()), re.IGNORECASE)

LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
HREF = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
EXPLICIT_ANCHOR = re.compile(r"""<a\s+(?:id|name)\s*=\s*["']([^"']+)["']""")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
                ".ipynb_checkpoints", "reports", "build", "dist", "out", "cache"}


def tracked_files() -> list[str]:
    """Paths relative to the root, as git tracks them; without git, every file outside build output."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
        return sorted(p for p in listed.decode().split("\0") if p and (ROOT / p).is_file())
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
            found += [str((Path(folder) / f).relative_to(ROOT)) for f in files]
        return sorted(found)


def read_text(path: str) -> str | None:
    """The file's text, or None for a binary file."""
    data = (ROOT / path).read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_citations(text: str) -> list[str]:
    """``line N: excerpt`` for each citation of an outside document in ``text``."""
    found = []
    for match in CITATION.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        excerpt = " ".join(text[max(0, match.start() - 30):match.end() + 30].split())
        found.append(f"line {number}: ...{excerpt}...")
    return found


def markdown_of(path: str) -> str:
    """The markdown a reader sees: a .md file whole, a notebook's markdown cells."""
    text = (ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".ipynb"):
        cells = json.loads(text)["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return text


def link_targets(markdown: str) -> Iterator[str]:
    """Relative link targets (``path``, ``path#anchor`` or ``#anchor``); URLs are not checked."""
    for target in [*LINK.findall(markdown), *HREF.findall(markdown)]:
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, mailto:, data:
            yield target


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: tags, links and markup dropped, lower case, punctuation
    other than hyphens and underscores removed, spaces made hyphens."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    """Every anchor a markdown file defines: its headings' slugs (repeats numbered as GitHub does)
    and explicit ``<a id=...>`` / ``<a name=...>``. Headings inside fenced code are not headings."""
    anchors: set[str] = set(EXPLICIT_ANCHOR.findall(markdown))
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading:
            slug = github_slug(heading.group(2))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def broken_links(path: str) -> list[str]:
    """Each link of ``path``'s markdown that leaves the repository, names no file, or names no anchor."""
    problems = []
    source = (ROOT / path).parent
    for target in link_targets(markdown_of(path)):
        file_part, _, anchor = target.partition("#")
        resolved = (source / file_part).resolve() if file_part else (ROOT / path).resolve()
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved.read_text(encoding="utf-8")):
            problems.append(f"{target}: no heading or <a id> '{anchor}' in {resolved.relative_to(ROOT)}")
    return problems


def links_glossary(path: str) -> bool:
    """Whether a notebook's markdown links docs/glossary.md, or the report's source names it."""
    if path == REPORT_SOURCE:
        return "docs/glossary.md" in (ROOT / path).read_text(encoding="utf-8")
    source = (ROOT / path).parent
    return any((source / t.partition("#")[0]).resolve() == GLOSSARY for t in link_targets(markdown_of(path)))


NOTEBOOKS = sorted(p for p in tracked_files() if p.startswith("notebooks/") and p.endswith(".ipynb"))
MARKDOWN = ["README.md", *DOCS, *NOTEBOOKS]


# ---- the checks can fail ------------------------------------------------------------------------


@pytest.mark.parametrize("cited", [
    "see " + "engines" + ".md 1.2", "(" + "spec" + " section 4)", "The " + "spec" + " (section 4)",
    "the " + "spec" + "'s formula", "# " + "spec" + ": B * ps - D + 1", ".." + "/shared/" + "spec" + ".md",
    "/work" + "/shared" + "/seeds", "shared/" + "seeds/000.txt", "house " + "style" + ".md",
    "tokens (" + "spec" + "\n        section 1: ...)", "(" + "spec" + "\n# section 2)",
])
def test_a_citation_of_an_outside_document_is_found(cited: str) -> None:
    assert outside_citations(f"x = 1  # {cited}")


@pytest.mark.parametrize("fine", [
    "--spec-steps 5", "spec_topk: int = 1", "the speculative recipe", "def create_module(self, spec: ModuleSpec)",
    "kernelspec:", "docs/semantics.md#width-generations", "docs/engine-facts.md#sglang-dsa-page-table",
    "spec v2 off", "# spec_steps and topk",
])
def test_words_that_are_not_citations_pass(fine: str) -> None:
    assert not outside_citations(fine)


def test_github_slugs_of_the_headings_used_here() -> None:
    assert github_slug("Reach and margin") == "reach-and-margin"
    assert github_slug("Dynamic and static replay: the DSA page table") == "dynamic-and-static-replay-the-dsa-page-table"
    assert github_slug("vLLM's buffers") == "vllms-buffers"
    assert github_slug("`max_bs`") == "max_bs"
    assert github_slug('<a id="sglang-fa3-page-table"></a>FA3 page table') == "fa3-page-table"
    assert anchors_of("# A\n## A\n```\n# not a heading\n```\n<a id=\"x\"></a>") == {"a", "a-1", "x"}


def test_a_broken_link_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n[up](../../outside.md) [gone](b.md) [anchor](a.md#nope) "
                                            "[ok](a.md#title) [self](#title)\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert broken_links("docs/a.md") == ["../../outside.md: leaves the repository", "b.md: no such file",
                                         "a.md#nope: no heading or <a id> 'nope' in docs/a.md"]


# ---- the repository ---------------------------------------------------------------------------------


def test_no_file_cites_a_document_outside_the_repository() -> None:
    cited = {}
    for path in tracked_files():
        text = None if path in AWAITING_NOTEBOOK_OWNER else read_text(path)
        found = outside_citations(text) if text is not None else []
        if found:
            cited[path] = found[:3]
    assert not cited, "cite docs/ instead (docs/semantics.md, docs/engine-facts.md, docs/glossary.md):\n" + "\n".join(
        f"{path}: {'; '.join(lines)}" for path, lines in cited.items())


@pytest.mark.parametrize("path", MARKDOWN)
def test_every_relative_link_resolves(path: str) -> None:
    assert not broken_links(path)


def test_the_readme_links_every_docs_page() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in link_targets(markdown_of("README.md"))}
    missing = [page for page in DOCS if (ROOT / page).resolve() not in linked]
    assert not missing, f"README.md does not link {', '.join(missing)}"


def test_the_readme_is_a_front_page() -> None:
    lines = markdown_of("README.md").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move sections into docs/ and link them"


def test_the_pages_include_the_ones_the_readme_was_split_into() -> None:
    """The pages are found by a glob; a glob that found nothing would check nothing."""
    assert {"docs/semantics.md", "docs/engine-facts.md", "docs/glossary.md", "docs/preflight.md",
            "docs/releases.md", "docs/benchmarks.md", "docs/releases-vllm-table.md"} <= set(DOCS)


def test_every_docs_page_exists_and_the_index_lists_it() -> None:
    index = markdown_of("docs/README.md")
    for page in DOCS[1:]:
        assert (ROOT / page).is_file(), page
        assert f"]({Path(page).name})" in index, f"docs/README.md does not list {page}"


@pytest.mark.parametrize("path", [*NOTEBOOKS, REPORT_SOURCE])
def test_every_notebook_and_the_report_link_the_glossary(path: str) -> None:
    if path in AWAITING_NOTEBOOK_OWNER:
        pytest.skip(f"{path} is being rewritten on another branch (AWAITING_NOTEBOOK_OWNER)")
    assert links_glossary(path), f"{path} does not link docs/glossary.md"


def test_no_file_is_excused_that_needs_no_excuse() -> None:
    tracked = set(tracked_files())
    stale = []
    for path in sorted(AWAITING_NOTEBOOK_OWNER):
        if path not in tracked:
            stale.append(f"{path}: not tracked")
            continue
        text = read_text(path) or ""
        needs_glossary = path == REPORT_SOURCE or path.endswith(".ipynb")
        if not outside_citations(text) and (not needs_glossary or links_glossary(path)):
            stale.append(f"{path}: cites nothing outside and links the glossary")
    assert not stale, "remove from AWAITING_NOTEBOOK_OWNER: " + "; ".join(stale)
