"""What an engine version does with a launch command, as data: ``data/launch_defaults.json``.

Each version lists the defaults its argument resolution fills in (the attention backend it picks
for a device and model, the page size it forces, NGRAM's draft count and breadth, EAGLE's topk-1
rule), how far a run gets near the context limit (the scheduler's cap, the overshoot, whether
reads are clamped), and the models it knows. Every value sits beside the file and lines of the
wheel it was read from. A *pseudo-version* (``sglang==0.5.23+revert-ascend-width``) is a released
version with one fix reverted: it takes its ``base``'s defaults and ``data/engines.json`` entry,
and its own ``backends`` fields win.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.engines.store.versions import load_versions

DEFAULT_LAUNCH_DEFAULTS = Path(__file__).resolve().parents[3] / "data" / "launch_defaults.json"


@dataclass(frozen=True)
class Sourced:
    """One value and where it was read: ``file:lines`` inside the wheel, or ``workbench``."""

    value: object
    source: str
    note: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """What a check needs to know of a model beyond its preset: how the engines treat it."""

    model_paths: tuple[str, ...]
    preset: str | None  # a name in data/presets.json, or None (a --model-config without one)
    architecture: str
    attention: str  # "mha" or "mla"
    dsa: bool  # DeepSeek sparse attention (is_deepseek_dsa)
    index_kpool: int = 1
    num_nextn_predict_layers: int = 0
    context_len: int | None = None  # from a config.json; presets carry their own
    source: str = ""


@dataclass(frozen=True)
class LaunchVersion:
    engine: str  # "sglang==0.5.23"
    base: str | None  # a pseudo-version's release
    pseudo: str | None  # one line: what a pseudo-version stands for
    defaults: Mapping[str, Sourced]
    reach: Mapping[str, Sourced]
    backends: Mapping[str, Mapping[str, Sourced]] = field(default_factory=dict)  # a pseudo-version's changes

    @property
    def family(self) -> str:
        """The engine's name: ``sglang`` of ``sglang==0.5.23``."""
        return self.engine.split("==", 1)[0]

    def default(self, name: str) -> Sourced:
        try:
            return self.defaults[name]
        except KeyError:
            raise ValueError(f"{self.engine}: no launch default {name!r} in {DEFAULT_LAUNCH_DEFAULTS.name}") from None

    def backend_fields(self, component: str) -> dict[str, object]:
        """The sizing fields in force for ``component``: data/engines.json's entry for this
        version (or its base), with a pseudo-version's own fields over it."""
        versions = load_versions()
        entry = versions.get(self.engine) or (versions.get(self.base) if self.base else None)
        fields = entry.case_fields(component) if entry is not None else {}
        fields.update({k: v.value for k, v in self.backends.get(component, {}).items()})
        return fields

    def backend_source(self, component: str, name: str) -> str:
        """Where the value of ``name`` for ``component`` was read."""
        if name in self.backends.get(component, {}):
            return self.backends[component][name].source
        versions = load_versions()
        entry = versions.get(self.engine) or (versions.get(self.base) if self.base else None)
        if entry is None:
            return ""
        return entry.sources.get(component, {}).get(name) or entry.sources.get("*", {}).get(name, "")


@dataclass(frozen=True)
class LaunchData:
    versions: Mapping[str, LaunchVersion]
    newest: Mapping[str, str]  # engine family -> its newest modelled version
    models: tuple[ModelInfo, ...]
    gpus: Mapping[str, Mapping[str, object]]

    def version(self, engine: str) -> LaunchVersion:
        if engine not in self.versions:
            raise ValueError(f"--engine: {engine!r} is not a modelled version (allowed: {', '.join(self.versions)})")
        return self.versions[engine]

    def model(self, model_path: str) -> ModelInfo | None:
        wanted = model_path.rstrip("/").lower()
        for model in self.models:
            if any(wanted == p.lower() or wanted.endswith("/" + p.lower()) for p in model.model_paths):
                return model
        return None

    def known_models(self) -> list[str]:
        return [p for m in self.models for p in m.model_paths]


def _sourced(entries: object, where: str) -> dict[str, Sourced]:
    if not isinstance(entries, dict):
        raise ValueError(f"{where}: not an object")
    out = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or "value" not in entry or not isinstance(entry.get("source"), str):
            raise ValueError(f"{where}.{name}: needs \"value\" and \"source\"")
        out[name] = Sourced(entry["value"], entry["source"], str(entry.get("note", "")))
    return out


def _version(data: Mapping[str, object], by_name: Mapping[str, LaunchVersion], path: Path) -> LaunchVersion:
    engine = data.get("engine")
    if not isinstance(engine, str) or "==" not in engine:
        raise ValueError(f"{path}: engine: {engine!r} is not NAME==VERSION")
    base = data.get("base")
    if base is not None and base not in by_name:
        raise ValueError(f"{path}: {engine}: base: {base!r} is not listed before it")
    inherited = by_name[str(base)] if base is not None else None
    defaults = _sourced(data.get("defaults", {}), f"{path}: {engine}.defaults")
    reach = _sourced(data.get("reach", {}), f"{path}: {engine}.reach")
    backends_data = data.get("backends", {})
    if not isinstance(backends_data, dict):
        raise ValueError(f"{path}: {engine}.backends: not an object")
    backends = {c: _sourced(e, f"{path}: {engine}.backends.{c}") for c, e in backends_data.items()}
    if inherited is not None:
        defaults = {**inherited.defaults, **defaults}
        reach = {**inherited.reach, **reach}
    pseudo = data.get("pseudo")
    return LaunchVersion(engine, str(base) if base else None, str(pseudo) if pseudo else None, defaults, reach, backends)


def _model(data: object, path: Path) -> ModelInfo:
    if not isinstance(data, dict):
        raise ValueError(f"{path}: models: an entry is not an object")
    paths = data.get("model_path")
    if not isinstance(paths, list) or not paths:
        raise ValueError(f"{path}: models: model_path: a non-empty list")
    return ModelInfo(tuple(str(p) for p in paths), data.get("preset"), str(data["architecture"]), str(data["attention"]),
                     bool(data["dsa"]), int(data.get("index_kpool", 1)), int(data.get("num_nextn_predict_layers", 0)),
                     source=str(data.get("source", "")))


@functools.lru_cache(maxsize=4)
def load_launch_data(path: str | Path = DEFAULT_LAUNCH_DEFAULTS) -> LaunchData:
    path = Path(path)
    data = json.loads(path.read_text())
    versions: dict[str, LaunchVersion] = {}
    for entry in data.get("versions", []):
        version = _version(entry, versions, path)
        versions[version.engine] = version
    models = tuple(_model(m, path) for m in data.get("models", []))
    gpus = data.get("gpus", {}).get("value", {})
    return LaunchData(versions, dict(data.get("newest", {})), models, gpus)
