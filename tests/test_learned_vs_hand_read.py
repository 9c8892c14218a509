"""The values read by hand from the SGLang wheels against the values learned from their code.

``tests/data/sglang_hand_read.json`` keeps what ``data/engines.json`` held before the learned
files replaced it: four releases read whole, and ranges read across the wheels. Every one of
them is compared with the shipped learned files; a disagreement is allowed only where it is
listed in ``CHANGED`` (the engine's answer wins, and docs/releases.md's "What learning changed" says
why), so a new disagreement, or a listed one that went away, fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.engines.store import learned
from workbench.engines.store.releases import releases, split, version_key

HAND_READ = json.loads((Path(__file__).parent / "data" / "sglang_hand_read.json").read_text())
# The README and its pages in docs/ (docs/releases.md holds "What learning changed")
ROOT = Path(__file__).resolve().parents[1]
DOCS_TEXT = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])

# (release, field) -> (read by hand, learned): each explained in docs/releases.md.
CHANGED: dict[tuple[str, str], tuple[Any, Any]] = {
    # read as ``ctx // ps``, which no rule of the model gave then (None); now the rule context-floor, measured
    **{(f"sglang=={v}", "backends.sglang-ascend-block-tables.rule"): (None, "context-floor")
       for v in ("0.5.2", "0.5.3", "0.5.3.post2", "0.5.3.post3", "0.5.4", "0.5.4.post1")},
    ("sglang==0.5.4.post2", "backends.sglang-ascend-block-tables.rule"): (None, "context"),
    ("sglang==0.5.4.post3", "backends.sglang-ascend-block-tables.rule"): (None, "context"),
    ("sglang==0.5.4", "backends.sglang-dsa-page-table.replay"): ("dynamic", None),
    ("sglang==0.5.4.post1", "backends.sglang-dsa-page-table.replay"): ("dynamic", None),
    ("sglang==0.5.16", "backends.sglang-dsa-page-table.replay"): ("static", None),
}

# The hand-read entry's fields, as the learned section names them.
SETTINGS = {"width_gen": "width_gen", "ascend_rule": "backends.sglang-ascend-block-tables.rule",
            "dsa_rule": "backends.sglang-dsa-page-table.rule", "dsa_replay": "backends.sglang-dsa-page-table.replay",
            "dsa_draft_extend_rows": "backends.sglang-dsa-page-table.draft_extend_rows",
            "npu_gather": "backends.allocator.gather", "cuda_gather": "conformance.cuda_gather",
            "cuda_merge_bound": "conformance.cuda_merge_bound"}


def _learned(engine: str, field: str) -> Any:
    data = learned.load(engine)
    if data is None or "buffers" not in data["sections"]:
        return "(not learned)"
    node: Any = data["sections"]["buffers"]
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node.get("value") if isinstance(node, dict) else None


def _hand_read_pairs() -> list[tuple[str, str, Any]]:
    """(release, learned field, value read by hand) for the four releases read whole."""
    pairs = []
    for entry in HAND_READ["versions"]:
        engine = entry["engine"]
        for name, fact in entry["conformance"].items():
            if name in SETTINGS:
                pairs.append((engine, SETTINGS[name], fact["value"]))
        for component, fields in entry["backends"].items():
            for name, fact in fields.items():
                pairs.append((engine, f"backends.{component}.{name}", fact["value"]))
    return pairs


def _in_range(engine: str, span: str) -> bool:
    """``span`` is ``LOW-HIGH``, both read; the .postN of HIGH are inside it."""
    low, high = span.split("-")
    return version_key(low) <= version_key(split(engine)[1]) <= version_key(high + ".post99")


def _range_pairs() -> list[tuple[str, str, Any]]:
    """(release, learned field, value) for every learned release inside a range read by hand."""
    have = {f"sglang=={p.stem}" for p in (learned.SHIPPED / "sglang").glob("*.json")
            if "buffers" in json.loads(p.read_text())["sections"]}
    return [(engine, item["field"], item["value"]) for item in HAND_READ["history"]
            for engine in releases("sglang") if engine in have and _in_range(engine, item["releases"])]


def _disagreements() -> dict[tuple[str, str], tuple[Any, Any]]:
    found = {}
    for engine, field, read in [*_hand_read_pairs(), *_range_pairs()]:
        got = _learned(engine, field)
        if got != read:
            found[(engine, field)] = (read, got)
    return found


def test_hand_read_values_agree_with_the_learned_ones_except_where_listed() -> None:
    assert _disagreements() == CHANGED


def test_every_listed_change_is_in_the_docs() -> None:
    for engine, field in CHANGED:
        assert f"{split(engine)[1]}" in DOCS_TEXT and field.split(".")[-2 if "." in field else -1] in DOCS_TEXT, (engine, field)
