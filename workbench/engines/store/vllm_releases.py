"""The vLLM backends' data, release by release: what each release's own code measured, else read.

A release's facts for a backend come from its learned file (``data/engines/vllm/X.json``, section
``buffers``, written by ``workbench engines learn vllm==X``; a file learned on this machine, in the
workbench's cache, wins over the shipped one). A release that was never learned falls back to its
hand-read entry in ``data/engines.json`` (each value with the file and line it was read from),
where it has one. ``tests/test_vllm_learned.py`` checks the hand-read entries against the learned
ones: where they disagree, the engine's answer is the one used.

Worked example: ``facts("vllm-indexer-block-table")["vllm==0.23.0"]["table_alignment"]`` is the
measured fact ``{"value": "128-div-block-size", "how": "measured", "function":
"vllm.v1.worker.block_table.MultiGroupBlockTable", "states": 80, ...}``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from workbench.engines.store import learned
from workbench.engines.store.releases import split, version_key
from workbench.engines.store.versions import DEFAULT_VERSIONS

Facts = dict[str, dict[str, Any]]  # field -> fact


@functools.lru_cache(maxsize=8)
def learned_facts(component: str, name: str = "vllm", section_name: str = "buffers") -> dict[str, Facts]:
    """``{engine: {field: fact}}`` of every learned release of engine ``name`` whose section
    ``section_name`` has ``component``, oldest release first."""
    found: dict[str, Facts] = {}
    for engine in sorted(learned.learned_releases(name), key=lambda e: version_key(split(e)[1])):
        section = learned.section(engine, section_name) or {}
        facts = section.get("backends", {}).get(component)
        if isinstance(facts, dict):
            found[engine] = facts
    return found


def bracketing(found: Mapping[str, object], engine: str) -> str | None:
    """The measured release whose facts (``found``: release -> facts) a launch of ``engine`` takes:
    its own; else, for a release between two measured ones whose facts are equal, the older of them
    (the rows name it); else None (never measured, and its neighbours differ or are missing)."""
    if engine in found:
        return engine
    wanted = version_key(split(engine)[1])
    before = [e for e in found if version_key(split(e)[1]) < wanted]
    after = [e for e in found if version_key(split(e)[1]) > wanted]
    before.sort(key=lambda e: version_key(split(e)[1]))
    after.sort(key=lambda e: version_key(split(e)[1]))
    if before and after and found[before[-1]] == found[after[0]]:
        return before[-1]
    return None


@functools.lru_cache(maxsize=8)
def _hand_read_entries() -> tuple[dict[str, Any], ...]:
    data = json.loads(DEFAULT_VERSIONS.read_text())
    return tuple(entry for entry in data.get("versions", []) if str(entry.get("engine", "")).startswith("vllm"))


def hand_read(component: str) -> dict[str, dict[str, Any]]:
    """``{engine: {field: value}}`` of ``data/engines.json``'s entries for ``component`` (read from
    the file itself: those are the values read by hand)."""
    found = {}
    for entry in _hand_read_entries():
        fields = entry.get("backends", {}).get(component)
        if isinstance(fields, dict):
            found[str(entry["engine"])] = {name: fact["value"] for name, fact in fields.items()}
    return found


def values(component: str, fields: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``{engine: {field: value}}`` for every release that has a value for each of ``fields``:
    the learned ones, then the hand-read ones no learned file covers; ordered by release."""
    chosen: dict[str, dict[str, Any]] = {}
    for engine, facts in learned_facts(component).items():
        found = {name: facts.get(name, {}).get("value") for name in fields}
        if all(value is not None for value in found.values()):
            chosen[engine] = found
    learned_engines = set(learned_facts(component))
    for engine, entry in hand_read(component).items():
        if engine not in learned_engines and all(name in entry for name in fields):
            chosen[engine] = {name: entry[name] for name in fields}
    return dict(sorted(chosen.items(), key=lambda item: version_key(split(item[0])[1])))


def source(component: str, engine: str, field: str) -> str:
    """How ``field`` of ``engine`` was obtained, in one line (measured / read / hand-read)."""
    fact = learned_facts(component).get(engine, {}).get(field)
    if isinstance(fact, Mapping):
        if fact.get("how") == "measured":
            return f"measured: {fact.get('function')} on {fact.get('states')} states"
        return f"{fact.get('how')}: {fact.get('source') or fact.get('searched')} ({fact.get('reason')})"
    for entry in _hand_read_entries():
        if entry.get("engine") == engine:
            return f"read by hand: {entry.get('backends', {}).get(component, {}).get(field, {}).get('source', '')}"
    return ""


def clear() -> None:
    """Forget the cached facts (a release was just learned)."""
    learned_facts.cache_clear()


def data_release(engine: str, measured: list[str]) -> str | None:
    """The release whose data a launch of ``engine`` takes: its own; none when it was learned and
    lacks the buffer; else (never learned) the nearest measured one (``releases.nearest``)."""
    from workbench.engines.store import learned, releases

    if engine in measured:
        return engine
    if learned.path(engine) is not None:
        return None
    return releases.nearest(measured, engine)
