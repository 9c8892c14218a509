"""Integrity of the launch-command test data (tests/data): the records, their sources, the model configs.

This checks the data set itself, not the preflight: every record is complete and cites an https
source, every model id a record names either has a config.json in the Hugging Face cache layout
under tests/data/hf_cache/hub or is listed as not found in tests/data/hf_cache/SOURCES.md, a
config kept for a model no command names is one the project's README or docs/ examples name, and the set
still has the mix it was collected for (tests/data/README.md).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
RECORDS = DATA / "launch_commands.jsonl"
HUB = DATA / "hf_cache" / "hub"
SOURCES = DATA / "hf_cache" / "SOURCES.md"
PROJECT_ROOT = Path(__file__).parent.parent
# The project README and its pages in docs/, where the README's examples moved (issue 41)
PROJECT_DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]

FIELDS = {"id", "command", "source", "title", "seen", "engine", "release", "models", "model_ids", "notes"}
ENGINES = {"sglang", "vllm", "vllm-ascend"}
# Minimums the collection aimed at (tests/data/README.md): a shrinking set is a failing set.
MINIMUMS = {"records": 125, "sglang": 30, "vllm": 20, "ascend": 8, "speculative": 35}

# A command speculates when it names a speculative option in any spelling: --speculative-algorithm,
# the abbreviation --speculative-algo, --speculative-config (JSON or dotted keys), --speculative_config,
# or the old vLLM --num-speculative-tokens / --speculative-model.
SPECULATIVE = re.compile(r"--speculative[-_]|--num-speculative-tokens")
ASCEND = re.compile(r"--device[ =]npu|--attention-backend[ =]ascend")
REVISION = re.compile(r"[0-9a-f]{40}")
LISTED_ID = re.compile(r"^\| `([^`]+)` \|")


def load_records() -> list[dict[str, Any]]:
    lines = RECORDS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def listed_ids(section: str) -> set[str]:
    """Model ids in the first column of the table under the '## <section>' heading of SOURCES.md."""
    text = SOURCES.read_text(encoding="utf-8")
    match = re.search(rf"^## {section}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"SOURCES.md has no '## {section}' section"
    return {m.group(1) for line in match.group(1).splitlines() if (m := LISTED_ID.match(line))}


def cache_dir(model_id: str) -> Path:
    return HUB / ("models--" + model_id.replace("/", "--"))


def is_ascend(record: dict[str, Any]) -> bool:
    return record["engine"] == "vllm-ascend" or bool(ASCEND.search(record["command"]))


def named_as_a_whole_id(model_id: str, text: str) -> bool:
    """True when text names model_id itself, not a longer id it is a prefix or suffix of."""
    return re.search(rf"(?<![\w./-]){re.escape(model_id)}(?![\w./-])", text) is not None


RECORDS_LIST = load_records()
REFERENCED_IDS = sorted({m for r in RECORDS_LIST for m in r["model_ids"] if m is not None})
# Configs kept for the README's and docs/' examples (SOURCES.md says which) although no command names them.
EXAMPLE_IDS = sorted(listed_ids("Found") - set(REFERENCED_IDS))


def test_every_line_is_a_complete_record() -> None:
    for record in RECORDS_LIST:
        assert set(record) == FIELDS, record.get("id")
        rid = record["id"]
        assert isinstance(rid, str) and re.fullmatch(r"[a-z0-9][a-z0-9.-]*", rid), rid
        assert isinstance(record["command"], str) and record["command"].strip(), rid
        assert record["engine"] in ENGINES, rid
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["seen"]), rid
        assert record["release"] is None or isinstance(record["release"], str), rid
        assert isinstance(record["title"], str) and record["title"], rid
        assert isinstance(record["notes"], str), rid
        models, model_ids = record["models"], record["model_ids"]
        assert isinstance(models, list) and models and all(isinstance(m, str) and m for m in models), rid
        assert isinstance(model_ids, list) and len(model_ids) == len(models), rid
        # org/name, or a bare legacy hub name (``gpt2``), which the hub still serves under that name
        assert all(m is None or re.fullmatch(r"[\w.-]+(/[\w.-]+)?", m) for m in model_ids), rid


def test_ids_are_unique() -> None:
    counts = Counter(r["id"] for r in RECORDS_LIST)
    assert [rid for rid, n in counts.items() if n > 1] == []


def test_every_source_is_an_https_url() -> None:
    for record in RECORDS_LIST:
        assert re.fullmatch(r"https://[^\s/]+\.[^\s/]+/\S*", record["source"]), record["id"]


def test_repository_file_sources_are_pinned_to_a_commit() -> None:
    """A file in a GitHub repository is cited at a commit, so the text it quotes cannot move."""
    for record in RECORDS_LIST:
        source = record["source"]
        if "/blob/" in source:
            assert re.fullmatch(r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/\S+", source), record["id"]


def test_each_model_is_named_in_its_command() -> None:
    for record in RECORDS_LIST:
        for model in record["models"]:
            assert model in record["command"], (record["id"], model)


@pytest.mark.parametrize("model_id", REFERENCED_IDS + EXAMPLE_IDS)
def test_each_model_id_has_a_config_or_is_listed_as_not_found(model_id: str) -> None:
    found, not_found = listed_ids("Found"), listed_ids("Not found")
    assert (model_id in found) != (model_id in not_found), f"{model_id}: listed in neither or both sections"
    if model_id in not_found:
        assert not cache_dir(model_id).exists(), f"{model_id} is listed as not found but has a cache folder"
        return
    revision = (cache_dir(model_id) / "refs" / "main").read_text(encoding="utf-8")
    assert REVISION.fullmatch(revision), f"{model_id}: refs/main holds {revision!r}"
    config = cache_dir(model_id) / "snapshots" / revision / "config.json"
    assert config.is_file(), f"{model_id}: refs/main names {revision}, which has no snapshots/{revision}/config.json"
    parsed = json.loads(config.read_text(encoding="utf-8"))
    assert isinstance(parsed, dict) and parsed.get("architectures"), model_id
    assert f"`{revision}`" in SOURCES.read_text(encoding="utf-8"), f"{model_id}: its revision is not in SOURCES.md"


def test_the_cache_holds_only_listed_models_and_only_config_files() -> None:
    found = listed_ids("Found")
    folders = {p.name for p in HUB.iterdir()}
    assert folders == {"models--" + m.replace("/", "--") for m in found}
    for path in HUB.rglob("*"):
        if path.is_file():
            assert path.name in {"main", "config.json", "generation_config.json"}, path


def test_sources_list_every_model_the_commands_name() -> None:
    listed = listed_ids("Found") | listed_ids("Not found")
    assert set(REFERENCED_IDS) - listed == set()


def test_sources_list_no_model_that_neither_a_command_nor_the_readme_names() -> None:
    """A not-found entry must come from a command; a found one may also come from an example of the README
    or of docs/."""
    assert listed_ids("Not found") - set(REFERENCED_IDS) == set()
    readme = "\n".join(p.read_text(encoding="utf-8") for p in PROJECT_DOCS)
    assert [m for m in EXAMPLE_IDS if not named_as_a_whole_id(m, readme)] == []


def test_the_set_still_has_the_mix_it_was_collected_for() -> None:
    engines = Counter(r["engine"] for r in RECORDS_LIST)
    counts = {
        "records": len(RECORDS_LIST),
        "sglang": engines["sglang"],
        "vllm": engines["vllm"],
        "ascend": sum(is_ascend(r) for r in RECORDS_LIST),
        "speculative": sum(bool(SPECULATIVE.search(r["command"])) for r in RECORDS_LIST),
    }
    short = {k: (counts[k], need) for k, need in MINIMUMS.items() if counts[k] < need}
    assert short == {}, f"below the minimum (have, need): {short}"


def _hash_confirmed_rows() -> list[tuple[str, str, int, str]]:
    """(model id, revision, size, hub git blob SHA-1) of SOURCES.md's table of files the hub's own
    content hash confirms."""
    text = SOURCES.read_text(encoding="utf-8")
    table = text.split("### Files whose bytes the hub's own content hash confirms", 1)[1].split("## Not found", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{40})` \| (\d+) \| `([0-9a-f]{40})` \|", table, re.M)
    return [(model_id, revision, int(size), blob) for model_id, revision, size, blob in rows]


def test_each_hash_confirmed_config_is_the_blob_the_hub_names() -> None:
    """The file's git blob SHA-1 (git's own formula: sha1 of ``blob <size>\\0`` and the bytes) and
    its size are the identifier the hub gives the published file, as the evidence records it."""
    import hashlib

    rows = _hash_confirmed_rows()
    assert len(rows) == 10
    for model_id, revision, size, blob in rows:
        data = (cache_dir(model_id) / "snapshots" / revision / "config.json").read_bytes()
        assert len(data) == size, model_id
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, model_id
        assert hashlib.sha1(data).hexdigest() == revision, model_id  # the folder is named as every other here
