"""Every claim the report states, checked against the atlas and the sweeps it comes from.

The session's small report (``conftest.small_report``: every notebook with its test parameters)
writes its figures with their captions and claims, the frames they were computed from
(``<out>/results/*.json``), notebook 00's rule table and ``index.html``. Here, with code of its own
(plain Python over the JSON records, not the library's functions):

* every claim of every caption is evaluated again on its results file, and every number a caption
  states must be one of its claims' values (a caption cannot say a number its data does not hold);
* the findings on the report's first screen are the atlas summary's reachable rows of each release,
  with their outcome, loud or silent, lengths, conditions and fix, and each row's worst setting is
  the worst of the atlas's settings;
* notebook 00's rule table is its sweeps: each cell's word, first failing length and counts.

``claim_problems`` and ``findings_problems`` take any report folder, so a report built by hand can
be checked the same way (``python tests/test_claims.py REPORT_DIR``).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from workbench.atlas.findings import row_latent

SILENT = {"silent-overread", "silent-overwrite"}
NUMBER = re.compile(r"(?<![\w.\-])\+?\d[\d,]*(?:\.\d+)?(?![\w])")


def _records(out: Path, name: str) -> list[dict[str, Any]]:
    return list(json.loads((out / "results" / f"{name}.json").read_text()))


# ---- captions -------------------------------------------------------------------------------------


def _passes(record: dict[str, Any], column: str, op: str, value: Any) -> bool:
    have = record.get(column)
    if op == "null":
        return have is None
    if op == "notnull":
        return have is not None
    if have is None:
        return False
    if op in ("in", "not in"):
        return (have in value) == (op == "in")
    return {"==": have == value, "!=": have != value, "<": have < value, "<=": have <= value,
            ">": have > value, ">=": have >= value}[op]


def recompute(records: list[dict[str, Any]], aggregate: str, column: str | None, where: list[list[Any]]) -> list[Any]:
    rows = [r for r in records if all(_passes(r, *condition) for condition in where)]
    if aggregate == "count":
        return [len(rows)]
    values = [r[column] for r in rows if r.get(column) is not None]  # type: ignore[index]
    if not values:
        return []
    return {"set": sorted(set(values)), "min": [min(values)], "max": [max(values)],
            "range": [min(values), max(values)]}[aggregate]


def numbers_in(text: str) -> list[float]:
    return [float(n.replace(",", "").lstrip("+")) for n in NUMBER.findall(text)]


def _as_numbers(values: list[Any]) -> set[float]:
    return {float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)}


def claim_problems(out: Path) -> list[str]:
    """Every way a caption of the report in ``out`` misstates its data (empty: every claim holds)."""
    problems = []
    for path in sorted((out / "figures").glob("*.json")):
        meta = json.loads(path.read_text()).get("layout", {}).get("meta") or {}
        caption, claims = str(meta.get("caption", "")), list(meta.get("claims", []))
        if not caption:
            problems.append(f"{path.stem}: no caption")
        stated: set[float] = set()
        for claim in claims:
            values = recompute(_records(out, claim["source"]), claim["aggregate"], claim["column"], claim["where"])
            if values != claim["values"]:
                problems.append(f"{path.stem}: {claim['text']!r} says {claim['values']}, the data {values}")
            said = numbers_in(claim["text"])
            if not set(said) <= _as_numbers(values):
                problems.append(f"{path.stem}: {claim['text']!r} states {said}, the data {values}")
            # ... and states every value it claims (a list that leaves one out says something else)
            unsaid = [v for v in claim["values"] if claim["text"] and (
                float(v) not in said if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v) not in claim["text"])]
            if unsaid and values not in ([0], []):
                problems.append(f"{path.stem}: {claim['text']!r} leaves out {unsaid}")
            if claim["text"] and claim["text"] not in caption:
                problems.append(f"{path.stem}: {claim['text']!r} is not in the caption")
            stated |= _as_numbers(values)
        loose = [n for n in numbers_in(caption) if n not in stated]
        if loose:
            problems.append(f"{path.stem}: the caption states {loose}, which no claim's data hold: {caption!r}")
    return problems


# ---- the findings on the first screen ------------------------------------------------------------


class _Findings(HTMLParser):
    """The findings section of index.html: per release block, its rows' cells, each cell as its lines
    (the text between ``<br>`` tags)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: dict[str, list[list[list[str]]]] = {}
        self.counts: dict[str, str] = {}
        self._release: str | None = None
        self._row: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._counts: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "div" and "release" in (a.get("class") or "").split():
            self._release = str(a["data-release"])
            self.blocks[self._release] = []
        elif tag == "p" and a.get("class") == "counts" and self._release:
            self._counts = []
        elif tag == "tr" and a.get("class") == "finding" and self._release:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = [""]
        elif tag == "br" and self._cell is not None:
            self._cell.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append([line.strip() for line in self._cell])
            self._cell = None
        elif tag == "tr" and self._row is not None and self._release:
            self.blocks[self._release].append(self._row)
            self._row = None
        elif tag == "p" and self._counts is not None and self._release:
            self.counts[self._release] = "".join(self._counts)
            self._counts = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[-1] += data
        if self._counts is not None:
            self._counts.append(data)


MODE_LINE = re.compile(r"^(?P<mode>[\w-]+): from (?P<first>[\d,]+), reaches (?P<reach>[\d,]+)$")


def _per_mode(rows: list[list[list[str]]]) -> list[tuple[tuple[str, str], dict[str, str]]]:
    """A row per backend, a line per mode -> ((backend, mode), its cells) per mode line."""
    out = []
    for where, how, when, fix, fixed in rows:
        for line in where[1:]:
            match = MODE_LINE.match(line)
            mode = match["mode"] if match else line
            out.append(((where[0], mode), {"how": " ".join(how), "first": match["first"] if match else "",
                                           "reach": match["reach"] if match else "", "setting": " ".join(when),
                                           "fix": fix[0], "cost": fix[-1], "fixed_in": fixed[0]}))
    return out


def _version(engine: str) -> tuple[str, tuple[int, ...], str]:
    name, _, version = engine.partition("==")
    release, _, local = version.partition("+")
    return name, tuple(int(n) for n in re.findall(r"\d+", release)), local


def _fixed_in(summary: list[dict[str, Any]], row: dict[str, Any]) -> str | None:
    name, version, _ = _version(row["engine"])
    later = [r for r in summary if r["backend"] == row["backend"] and r["mode"] == row["mode"]
             and "+" not in r["engine"] and _version(r["engine"])[0] == name and _version(r["engine"])[1] > version]
    for r in sorted(later, key=lambda r: _version(r["engine"])):
        if r["status"] not in ("reachable", "refused"):  # a release that refuses to start the setting fixes nothing
            return str(r["engine"])
    return None


def _same_bytes(text: str, expected: float) -> bool:
    """'costs +1.5 KiB per ...' states ``expected`` bytes to the 0.1 shown; '+128 B' to the whole byte."""
    match = re.search(r"\+([\d,.]+) (B|KiB|MiB|GiB)", text)
    if not match:
        return False
    value, unit = float(match[1].replace(",", "")), match[2]
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
    return abs(value - expected) <= 0.5 if unit == "B" else abs(value * scale - expected) <= 0.05 * scale


def findings_problems(out: Path) -> list[str]:
    """Every way the report's findings differ from the atlas results in ``out`` (empty: they agree)."""
    parser = _Findings()
    parser.feed((out / "index.html").read_text())
    summary, settings = _records(out, "05_atlas_summary"), _records(out, "05_atlas_settings")
    problems = []
    releases = {r["engine"] for r in summary}
    if set(parser.blocks) != releases:
        problems.append(f"release blocks {sorted(parser.blocks)} are not the atlas's releases {sorted(releases)}")
    for release, rows in parser.blocks.items():
        reachable = {(r["backend"], r["mode"]): r for r in summary if r["engine"] == release and r["status"] == "reachable"
                     and not row_latent(pd.Series(r))}  # latent rows (no released setting runs the step) are listed apart
        modes = _per_mode(rows)
        shown = dict(modes)
        if set(shown) != set(reachable) or len(modes) != len(shown):
            problems.append(f"{release}: findings {sorted(shown)} are not the reachable rows {sorted(reachable)}")
            continue
        silent = sum(r["outcome"] in SILENT for r in reachable.values())
        counts = parser.counts.get(release, "")
        if f"{len(reachable) - silent} fails loudly" not in counts or f"{silent} fails silently" not in counts:
            problems.append(f"{release}: the counts line {counts!r} is not {len(reachable) - silent} loud, {silent} silent")
        for key, row in reachable.items():
            problems += _row_problems(release, shown[key], row, summary, settings)
    return problems


def _row_problems(release: str, cells: dict[str, str], row: dict[str, Any], summary: list[dict[str, Any]],
                  settings: list[dict[str, Any]]) -> list[str]:
    where = f"{release} {row['backend']} {row['mode']}"
    word = "fails silently" if row["outcome"] in SILENT else "fails loudly"
    problems = []
    how = cells["how"]
    if not (how.startswith(word + " ") and how.endswith(f"({row['outcome']})")):
        problems.append(f"{where}: says {how!r}, the atlas {word}: {row['outcome']}")
    if cells["first"] != f"{row['first_failing_seq_len']:,}" or cells["reach"] != f"{row['reachable_len']:,}":
        problems.append(f"{where}: lengths {cells['first']}, {cells['reach']}; the atlas {row['first_failing_seq_len']}, "
                        f"{row['reachable_len']}")
    setting = cells["setting"]
    for part in (row.get("preset"), *(f"{label} {int(row[column]):,}" for column, label in
                                      (("context_len", "context"), ("page_size", "page size"), ("batch", "batch of"))
                                      if row.get(column))):
        if part and str(part) not in setting:
            problems.append(f"{where}: the setting {setting!r} does not name {part!r}")
    fixed = _fixed_in(summary, row)
    expected = fixed.replace("==", " ") if fixed else "unfixed (as of "
    if not cells["fixed_in"].startswith(expected):
        problems.append(f"{where}: fixed in {cells['fixed_in']!r}, the atlas's later releases say {fixed}")
    costed = row.get("extra_bytes") is not None and row.get("max_bs")
    if costed and (not _same_bytes(cells["cost"], row["extra_bytes"] / row["max_bs"]) or "per request slot" not in cells["cost"]):
        problems.append(f"{where}: the fix's cost {cells['cost']!r} is not the atlas's {row['extra_bytes']} bytes "
                        f"over {row['max_bs']} request slots")
    same = [s for s in settings if (s["engine"], s["backend"], s["mode"]) == (release, row["backend"], row["mode"])]
    worst = min((s["margin"] for s in same if s.get("margin") is not None), default=None)
    if worst != row["margin"]:
        problems.append(f"{where}: margin {row['margin']} is not the worst setting's ({worst})")
    return problems


# ---- notebook 00's rule table ---------------------------------------------------------------------


def _sweep_cell(records: list[dict[str, Any]]) -> str:
    failing = [r for r in records if r["first_failing_seq_len"] is not None]
    if not failing:
        return f"no reachable failure ({len(records)} of {len(records)})"
    first = min(failing, key=lambda r: (r["failing_offset"], r["context_len"]))
    how = "fails silently" if all(r["outcome"] in SILENT for r in failing) else "fails loudly"
    return (f"{how} at s = {first['first_failing_seq_len']:,} (ctx {first['context_len']:,}, ps {first['page_size']}, "
            f"D {first['draft_tokens']}, {first['width_gen']}); {len(failing)} of {len(records)}")


def _gather_cell(records: list[dict[str, Any]]) -> str:
    failing = [r for r in records if r["outcome"] not in ("ok", "out-of-memory")]
    if not failing:
        return f"safe ({len(records)} of {len(records)} pools)"
    how = "fails silently" if all(r["outcome"] in SILENT for r in failing) else "fails loudly"
    pools = [name for name, hit in (("an exactly full pool", any(r["free_pages"] == r["pages_needed"] for r in failing)),
                                    ("a short pool", any(r["free_pages"] < r["pages_needed"] for r in failing))) if hit]
    outcomes = ", ".join(sorted({r["outcome"] for r in failing}))
    return f"{how} on {' and '.join(pools)} ({outcomes}); {len(failing)} of {len(records)} pools"


def rule_table_problems(out: Path) -> list[str]:
    table = json.loads((out / "tables" / "00_verdict.json").read_text())
    sweeps = _records(out, "00_npu_sweep") + _records(out, "00_dsa_sweep")
    columns = table["columns"]
    problems = []
    for row in table["rows"]:
        cells = dict(zip(columns, row))
        label, rule = cells["backend"], cells["rule"]
        if label.startswith("allocator"):
            expected = _gather_cell([r for r in _records(out, "00_exact_fit") if r["gather"] == rule])
            if cells["decode"] != expected or any(cells[m] != "n/a" for m in columns[2:] if m != "decode"):
                problems.append(f"00_verdict {label} {rule}: says {cells}, the sweep {expected!r}")
            continue
        component, _, replay = label.partition(" (")
        replay = replay.removesuffix(" replay)")
        for mode in columns[2:]:
            records = [r for r in sweeps if r["component"] == component and r["rule"] == rule and r["mode"] == mode
                       and (not replay or r["replay"] == replay)]
            expected = _sweep_cell(records) if records else "n/a"
            if cells[mode] != expected:
                problems.append(f"00_verdict {label} {rule} {mode}: says {cells[mode]!r}, the sweep {expected!r}")
    return problems


# ---- the tests -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(small_report: tuple[Path, list[Any], str]) -> Path:
    out, runs, log = small_report
    assert runs and all(run.error is None for run in runs), log
    return out


def test_every_caption_states_what_its_data_hold(report: Path) -> None:
    figures = list((report / "figures").glob("*.json"))
    assert figures and sum(bool(json.loads(f.read_text())["layout"]["meta"].get("claims")) for f in figures) >= 10
    assert claim_problems(report) == []


def test_the_findings_are_the_atlas_reachable_rows(report: Path) -> None:
    assert findings_problems(report) == []


def test_notebook_00s_rule_table_is_its_sweeps(report: Path) -> None:
    assert rule_table_problems(report) == []


def test_a_false_caption_is_caught(report: Path, tmp_path: Path) -> None:
    """The check can fail: a caption whose number is changed, or a claim whose value is, is found."""
    copy = tmp_path / "report"
    shutil.copytree(report / "figures", copy / "figures")
    shutil.copytree(report / "results", copy / "results")
    path = copy / "figures" / "05_atlas.json"
    spec = json.loads(path.read_text())
    claim = next(c for c in spec["layout"]["meta"]["claims"] if c["values"] and c["values"][0])
    wrong = f"{claim['values'][0] + 1:,}"
    spec["layout"]["meta"]["caption"] = spec["layout"]["meta"]["caption"].replace(claim["text"], "")
    claim["text"] = claim["text"].replace(f"{claim['values'][0]:,}", wrong, 1)
    spec["layout"]["meta"]["caption"] += " " + claim["text"]
    path.write_text(json.dumps(spec))
    assert any(wrong in problem for problem in claim_problems(copy))


if __name__ == "__main__":  # a report built by hand: python tests/test_claims.py REPORT_DIR
    folder = Path(sys.argv[1])
    found = claim_problems(folder) + findings_problems(folder) + rule_table_problems(folder)
    print("\n".join(found) or "every claim holds")
    sys.exit(1 if found else 0)
