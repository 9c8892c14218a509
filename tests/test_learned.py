"""The shipped learned files, checked offline (fast, no engine code): their schema, the models
against the states the engine's own code was recorded at, and every listed release accounted for."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from workbench import backends
from workbench.analysis.records import probe_record
from workbench.backends import pooled_backend_of
from workbench.engines.checking.states import geometry_of
from workbench.engines.store import learned
from workbench.engines.store.releases import releases, split

SHIPPED = sorted(p for p in (learned.SHIPPED / "sglang").glob("*.json")
                 if "buffers" in json.loads(p.read_text())["sections"])
ROOT = Path(__file__).resolve().parents[1]
RELEASES_PAGE = (ROOT / "docs" / "releases.md").read_text()  # what stopped a release's learning


def _section(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    section: dict[str, Any] = data["sections"]["buffers"]
    return section


def _facts(node: object, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "how" in node:
            return [(where, node)]
        return [f for key, value in node.items() for f in _facts(value, f"{where}.{key}")]
    return []


def test_every_listed_sglang_release_is_learned_or_said_why_not() -> None:
    """A release has a file, or is a .postN whose data equal its base's (docs/releases.md's list), or
    docs/releases.md says what stopped its learning."""
    have = {f"sglang=={p.stem}" for p in SHIPPED}
    assert len(have) >= 24
    for engine in releases("sglang"):
        if engine in have:
            continue
        version = split(engine)[1]
        assert f"`{version}`" in RELEASES_PAGE, f"{engine}: no learned file and docs/releases.md does not say why"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_learned_file_is_sound(path: Path) -> None:
    data = json.loads(path.read_text())
    assert learned.validate(data) == []
    assert data["engine"] == f"sglang=={path.stem}" and len(data["wheel"]["sha256"]) == 64
    section = data["sections"]["buffers"]
    assert section["learner"].startswith("sglang-buffers ")
    facts = _facts(section)
    assert facts and all(fact["how"] in ("measured", "read", "absent") for _, fact in facts)
    for where, fact in facts:  # a measured value without a value says why: a finding
        if fact["how"] == "measured" and fact["value"] is None:
            assert fact.get("finding"), where
        if fact["how"] == "read":
            assert ".py" in fact["source"] and fact["reason"], where


def _named_rule(where: str, fact: dict[str, Any]) -> Any:
    """The model's function of a state for a width fact at ``where`` (``.backends.COMPONENT.KEY``)."""
    parts = where.split(".")
    if parts[1] == "width_gen":
        value = fact["value"]
        return lambda s: geometry_of({**s, "context_len": 1, "max_bs": 1, "width_gen": value}).req_to_token_extra
    component, key = parts[2], parts[3]
    if key == "rule":
        backend = backends.backend_of(component)
        return lambda s: backend.width(geometry_of(s), fact["value"])
    buffer = pooled_backend_of(component).buffer(key)
    return lambda s: buffer.capacity(geometry_of(s), fact["value"], s["max_bs"])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_the_models_give_what_the_engine_gave_at_the_recorded_states(path: Path) -> None:
    """Every named rule, run again on the grid points recorded with the engine's width."""
    checked = 0
    for where, fact in _facts(_section(path)):
        owner = fact["rule"] if isinstance(fact.get("rule"), dict) else fact  # a pooled buffer's: its rule's
        if not owner.get("samples") or owner["value"] is None:
            continue
        rule = _named_rule(where, owner)
        for sample in owner["samples"]:
            assert rule(sample["state"]) == sample["engine"], (where, sample)
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_the_models_fail_where_the_engines_replay_failed(path: Path) -> None:
    """The boundary states each release's own replay ran at: the model's probe gives the same
    outcome, and torch's message where the engine raised."""
    for component, entries in _section(path)["backends"].items():
        fact = entries.get("on_overflow")
        if not fact or fact["value"] is None:
            continue
        reference, rule = fact["reference"], entries["rule"]["value"]
        for at in fact["at"]:
            case = {k: reference[k] for k in ("context_len", "page_size", "draft_tokens", "spec_steps", "spec_topk",
                                                 "draft_has_kv", "mode", "width_gen") if k in reference}
            if "replay" in entries and entries["replay"]["value"]:
                case["replay"] = entries["replay"]["value"]
            for option in backends.backend_of(component).case_options:  # learned per release (Ascend's spec_fill)
                if (entries.get(option) or {}).get("value") is not None:
                    case[option] = entries[option]["value"]
            record = probe_record({"component": component, "rule": rule, **case, "seq_lens": at["seq_lens"]}, "cpu")
            if at["outcome"] == "raised":
                assert record["outcome"] == "shape-error" and at["error"].endswith(str(record["error"])), (component, at)
            else:
                assert record["outcome"] in ("ok", "silent-overread"), (component, at, record)


@pytest.mark.parametrize("engine", ["sglang", "vllm", "vllm-ascend"])
def test_each_docs_table_is_the_page_the_files_give(engine: str) -> None:
    """``workbench engines releases NAME --table > docs/releases-NAME-table.md`` regenerates the docs
    page of learned releases; the page must be, byte for byte, what the files give, and name at its
    top the command that regenerates it."""
    from workbench.engines.docs_pages import page_path
    from workbench.engines.learning.learned_table import page, table

    text = (ROOT / page_path(engine)).read_text(encoding="utf-8")
    assert text == page(engine) + "\n", f"stale: run workbench engines releases {engine} --table > {page_path(engine)}"
    assert f"`workbench engines releases {engine} --table > {page_path(engine)}`" in text.splitlines()[0]
    assert text.endswith(table(engine) + "\n") and text.count("\n| ") >= 20  # the table itself, one row a release


def test_the_launch_table_is_the_page_the_files_give() -> None:
    """``workbench engines launch-table > docs/releases-sglang-launch-table.md``: the same, for every
    listed SGLang release's parser and resolution."""
    from workbench import cli
    from workbench.engines.commands import launch_learn
    from workbench.engines.docs_pages import page_path

    path = page_path("sglang-launch")
    text = (ROOT / path).read_text(encoding="utf-8")
    printed = io.StringIO()
    assert cli.main(["engines", "launch-table"], printed) == 0
    assert text == printed.getvalue(), f"stale: run workbench engines launch-table > {path}"
    assert f"`workbench engines launch-table > {path}`" in text.splitlines()[0]
    assert launch_learn.table(list(releases("sglang"))) + "\n" == text[text.index("| release |"):]
