"""Engine versions as data: which sizing rule, width generation, replay and gather a release ships.

A release's data is what ``workbench engines learn`` measured from its own code
(``data/engines/NAME/VERSION.json``, section ``buffers``: ``learned.py``), each value with how it
was obtained (the function run and the number of states, or the file and line it was read from).
A *pseudo-version* (``sglang==0.5.23+revert-ascend-width``, ``data/engines/pseudo.json``) is a
learned release with one fix reverted: its base's data with its own fields over them. Entries of
``data/engines.json`` stand for the releases no learner has measured yet (vLLM's, until its
learner ships them); a learned release wins over an entry of the same name.

A case that names an ``engine`` takes that version's fields for its component; fields the case
gives itself win, so ``{"engine": "sglang==0.5.23", "rule": "context"}`` asks what 0.5.23 would
do with the legacy width.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workbench.engines.store import learned
from workbench.engines.store.releases import ENGINES, split, version_key

DEFAULT_VERSIONS = Path(__file__).resolve().parents[3] / "data" / "engines.json"
PSEUDO_VERSIONS = Path(__file__).resolve().parents[3] / "data" / "engines" / "pseudo.json"
VERSION_FIELDS = ("width_gen",)  # fields a version sets for every component
# the fields of a table backend or allocator a case takes (the string options among them: TableCase.options)
CASE_FIELDS = ("rule", "replay", "gather", "spec_fill", "graph_fill", "grid")
SECTION = "buffers"


@dataclass(frozen=True)
class EngineVersion:
    engine: str  # "sglang==0.5.23"
    read_from: str
    fields: Mapping[str, Mapping[str, object]]  # component -> field -> value
    sources: Mapping[str, Mapping[str, str]]  # component -> field -> how it was obtained
    common: Mapping[str, object]  # fields in force for every component (width_gen)
    facts: Mapping[str, Any] = field(default_factory=dict)  # the learned section as it is (conformance, history)
    base: str | None = None  # a pseudo-version's release
    pseudo: str | None = None  # one line: what a pseudo-version stands for

    def case_fields(self, component: str) -> dict[str, object]:
        """The fields this version sets for ``component`` (common ones included)."""
        return {**self.common, **self.fields.get(component, {})}


def how_obtained(fact: Mapping[str, Any]) -> str:
    """One line for a fact: ``measured: FUNCTION on N states (FILE:LINES)`` or ``read: FILE:LINES (REASON)``."""
    if fact.get("how") == "read":
        return f"read: {fact['source']} ({fact['reason']})"
    where = fact.get("found") or "; ".join(str(part["found"]) for part in fact.get("per_backend", {}).values()
                                           if isinstance(part, Mapping) and part.get("found"))
    found = f" ({where})" if where else ""
    return f"measured: {fact['function']} on {fact['states']} states{found}"


def from_learned(engine: str, section: Mapping[str, Any], read_from: str) -> EngineVersion:
    """The version a learned ``buffers`` section stands for: every fact with a value becomes a
    field (a table backend's ``rule`` and ``replay``, the allocator's ``gather``, a pooled buffer's
    ``{"rule", "check"}`` under its key), with how it was obtained as its source."""
    fields: dict[str, dict[str, object]] = {}
    sources: dict[str, dict[str, str]] = {}
    for component, entries in section.get("backends", {}).items():
        for name, fact in entries.items():
            pooled = isinstance(fact.get("value"), dict)
            if fact.get("value") is None or not (name in CASE_FIELDS or pooled):
                continue
            fields.setdefault(component, {})[name] = fact["value"]
            sources.setdefault(component, {})[name] = how_obtained(fact)
    common: dict[str, object] = {}
    for name in VERSION_FIELDS:
        fact = section.get(name)
        if isinstance(fact, dict) and fact.get("value") is not None:
            common[name] = fact["value"]
            sources.setdefault("*", {})[name] = how_obtained(fact)
    return EngineVersion(engine, read_from, fields, sources, common, facts=section)


def _from_entry(data: Mapping[str, object], path: Path) -> EngineVersion:
    """An entry of ``data/engines.json`` (values read by hand, each with its file and line)."""
    engine = data.get("engine")
    if not isinstance(engine, str) or "==" not in engine:
        raise ValueError(f"{path}: engine: {engine!r} is not NAME==VERSION")
    fields: dict[str, dict[str, object]] = {}
    sources: dict[str, dict[str, str]] = {}
    backends = data.get("backends", {})
    if not isinstance(backends, dict):
        raise ValueError(f"{path}: {engine}: backends: not an object")
    for component, entries in backends.items():
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: {engine}: {component}: not an object")
        for name, entry in entries.items():
            if not isinstance(entry, dict) or "value" not in entry or not isinstance(entry.get("source"), str):
                raise ValueError(f"{path}: {engine}: {component}.{name}: needs \"value\" and \"source\"")
            fields.setdefault(component, {})[name] = entry["value"]
            sources.setdefault(component, {})[name] = str(entry["source"])
    common: dict[str, object] = {}
    for name in VERSION_FIELDS:
        entry = data.get(name)
        if isinstance(entry, dict) and "value" in entry:
            common[name] = entry["value"]
            sources.setdefault("*", {})[name] = str(entry.get("source", ""))
    return EngineVersion(engine, str(data.get("read_from", "")), fields, sources, common)


def _pseudo(data: Mapping[str, Any], bases: Mapping[str, EngineVersion], path: Path) -> EngineVersion | None:
    """A pseudo-version over its learned base (None while the base is not learned)."""
    engine, base_name = str(data.get("engine")), str(data.get("base"))
    base = bases.get(base_name)
    if base is None:
        return None
    fields = {c: dict(f) for c, f in base.fields.items()}
    sources = {c: dict(s) for c, s in base.sources.items()}
    for component, entries in data.get("backends", {}).items():
        for name, entry in entries.items():
            if not isinstance(entry, dict) or "value" not in entry or not isinstance(entry.get("source"), str):
                raise ValueError(f"{path}: {engine}: {component}.{name}: needs \"value\" and \"source\"")
            fields.setdefault(component, {})[name] = entry["value"]
            sources.setdefault(component, {})[name] = str(entry["source"])
    facts = {**base.facts, "pseudo": {k: v for k, v in data.items() if k != "engine"}}
    return EngineVersion(engine, f"{base.engine} with one change: {data.get('pseudo', '')}", fields, sources,
                         dict(base.common), facts=facts, base=base.engine, pseudo=str(data.get("pseudo", "")))


@functools.lru_cache(maxsize=4)
def load_versions(path: str | Path = DEFAULT_VERSIONS, pseudo_path: str | Path = PSEUDO_VERSIONS) -> dict[str, EngineVersion]:
    """Every version, by its ``NAME==VERSION``: the learned releases (oldest first per engine), each
    with the components no learner measures filled from ``data/engines.json``, then the
    pseudo-versions over them, then ``data/engines.json``'s entries no learner replaced."""
    versions: dict[str, EngineVersion] = {}
    for name in ENGINES:
        for engine in sorted(learned.learned_releases(name), key=lambda e: version_key(split(e)[1])):
            data = learned.load(engine)
            section = None if data is None else data["sections"].get(SECTION)
            if section is not None:
                wheel = data.get("wheel", {}).get("file", "its wheel") if data else "its wheel"
                versions[engine] = from_learned(engine, section, f"learned from {wheel}")
    path = Path(path)
    entries = json.loads(path.read_text()).get("versions", []) if path.exists() else []
    read = {str(entry.get("engine")): _from_entry(entry, path) for entry in entries}
    for engine, version in read.items():
        if engine in versions:
            versions[engine] = _filled(versions[engine], version)
    pseudo_file = Path(pseudo_path)
    if pseudo_file.exists():
        for entry in json.loads(pseudo_file.read_text()).get("versions", []):
            made = _pseudo(entry, versions, pseudo_file)
            if made is not None:
                versions[made.engine] = _filled(made, read[made.engine]) if made.engine in read else made
    for engine, version in read.items():
        if engine not in versions:
            versions[engine] = version
    return versions


def _filled(learned_version: EngineVersion, read: EngineVersion) -> EngineVersion:
    """A learned version with the components only a hand reading gives (never over a learned one)."""
    missing = [c for c in read.fields if c not in learned_version.fields]
    if not missing:
        return learned_version
    fields = {**learned_version.fields, **{c: read.fields[c] for c in missing}}
    sources = {**learned_version.sources, **{c: read.sources[c] for c in missing if c in read.sources}}
    return replace(learned_version, fields=fields, sources=sources)


def measured_releases(name: str) -> list[str]:
    """The releases of engine ``name`` whose buffer data the models can take (pseudo-versions,
    ``0.5.23+revert-...``, left out): the ones a release without data of its own stands in by
    (``workbench.engines.store.releases.nearest``), oldest first."""
    found = [e for e in load_versions() if split(e)[0] == name and "+" not in e]
    return sorted(found, key=lambda e: version_key(split(e)[1]))


def engine_version(engine: str) -> EngineVersion:
    """The version named ``engine``; a ValueError naming the known ones otherwise."""
    versions = load_versions()
    if engine not in versions:
        name = engine.partition("==")[0]
        same = [e for e in versions if e.startswith(f"{name}==")] or list(versions)
        raise ValueError(f"engine: {engine!r} is not a modelled version (allowed: {', '.join(same)})")
    return versions[engine]


def _unknown(fact: Mapping[str, object]) -> bool:
    """A fact without a value that a default cannot stand for: not one the release lacks (absent: the
    path it names is not taken) nor one whose candidates every state agreed with alike (each gives
    the same tables, so the backend's default is as good)."""
    if fact.get("value") is not None or fact.get("how") == "absent":
        return False
    return "do not tell" not in str(fact.get("finding", ""))


def apply_engine(data: Mapping[str, object], component: str) -> dict[str, object]:
    """``data`` with its ``engine``'s fields for ``component`` filled in where it gives none."""
    engine = data.get("engine")
    if engine is None:
        return dict(data)
    if not isinstance(engine, str):
        raise ValueError(f"engine: {engine!r} is not a string (write NAME==VERSION)")
    version = engine_version(engine)
    defaults = version.case_fields(component)
    for name in CASE_FIELDS:  # a field the release's code gave no value for, and the case none either
        fact = version.facts.get("backends", {}).get(component, {}).get(name)
        if not isinstance(fact, Mapping) or not _unknown(fact):
            continue
        if name not in defaults and name not in data:
            why = fact.get("finding") or fact.get("reason") or "not measured"
            raise ValueError(f"engine: {engine} has no {name} for {component} ({why}); give {name} yourself")
    return {**defaults, **{k: v for k, v in data.items() if k != "engine"}}
