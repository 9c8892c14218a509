"""Engine versions as data: which sizing rule, width generation, replay and gather a release ships.

``data/engines.json`` holds one entry per pinned release (``sglang==0.5.23``). Each value sits
beside the file and line of the wheel it was read from, so a reader can check it. A case that
names an ``engine`` takes that version's fields for its component; fields the case gives itself
win, so ``{"engine": "sglang==0.5.23", "rule": "context"}`` asks what 0.5.23 would do with the
legacy width.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_VERSIONS = Path(__file__).resolve().parents[2] / "data" / "engines.json"
VERSION_FIELDS = ("width_gen",)  # fields a version sets for every component


@dataclass(frozen=True)
class EngineVersion:
    engine: str  # "sglang==0.5.23"
    read_from: str
    fields: Mapping[str, Mapping[str, object]]  # component -> field -> value
    sources: Mapping[str, Mapping[str, str]]  # component -> field -> "file:lines"
    common: Mapping[str, object]  # fields in force for every component (width_gen)

    def case_fields(self, component: str) -> dict[str, object]:
        """The fields this version sets for ``component`` (common ones included)."""
        return {**self.common, **self.fields.get(component, {})}


def _parse_version(data: Mapping[str, object], path: Path) -> EngineVersion:
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


@functools.lru_cache(maxsize=4)
def load_versions(path: str | Path = DEFAULT_VERSIONS) -> dict[str, EngineVersion]:
    """Every version of the data file, by its ``NAME==VERSION``."""
    path = Path(path)
    data = json.loads(path.read_text())
    versions = [_parse_version(v, path) for v in data.get("versions", [])]
    return {v.engine: v for v in versions}


def measured_releases(name: str) -> list[str]:
    """The releases of engine ``name`` whose buffer data the models can take (pseudo-versions,
    ``0.5.23+revert-...``, left out): the ones a release without data of its own stands in by
    (``workbench.engines.releases.nearest``)."""
    return [e for e in load_versions() if e.split("==", 1)[0] == name and "+" not in e]


def engine_version(engine: str) -> EngineVersion:
    """The version named ``engine``; a ValueError naming the known ones otherwise."""
    versions = load_versions()
    if engine not in versions:
        raise ValueError(f"engine: {engine!r} is not a modelled version (allowed: {', '.join(versions)})")
    return versions[engine]


def apply_engine(data: Mapping[str, object], component: str) -> dict[str, object]:
    """``data`` with its ``engine``'s fields for ``component`` filled in where it gives none."""
    engine = data.get("engine")
    if engine is None:
        return dict(data)
    if not isinstance(engine, str):
        raise ValueError(f"engine: {engine!r} is not a string (write NAME==VERSION)")
    defaults = engine_version(engine).case_fields(component)
    return {**defaults, **{k: v for k, v in data.items() if k != "engine"}}
