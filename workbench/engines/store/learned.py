"""What the workbench learned from one engine release's own code: ``data/engines/NAME/VERSION.json``.

One file per release, so a diff between two releases is readable. The file is made of sections,
each written by the part of the workbench that learns it (``write_section``), never by hand:

    {"engine": "sglang==0.5.21", "schema": 1,
     "wheel": {"file": "sglang-0.5.21-...whl", "sha256": "..."},
     "sections": {"buffers": {...}, "parser": {...}, "launch": {...}, "reach": {...}}}

Inside a section, every value a model uses is a *fact* saying how it was obtained:

    {"value": 4194304, "how": "measured", "function": "sglang.srt...init_cuda_graph_state", "states": 240}
    {"value": "g3", "how": "read", "source": "sglang/srt/mem_cache/allocation_sizing.py:105-115",
     "reason": "runs only inside ModelRunner on a device"}
    {"value": null, "how": "absent", "searched": "...", "reason": "no such function in this release"}

``measured``: the release's own function ran on the CPU on ``states`` states and gave it.
``read``: the code cannot run on a CPU; ``source`` is the file and lines inside the wheel, and
``reason`` says why it could not run. ``absent``: the release does not have the thing.

A learned file in the user's cache (``${WORKBENCH_CACHE:-~/.cache/workbench}/learned/``) wins over
the shipped one, so a release learned on this machine (``workbench engines learn``) is used
without editing the repository.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.engines.store.cache_root import cache_root
from workbench.engines.store.releases import split

SCHEMA = 1
SHIPPED = Path(__file__).resolve().parents[3] / "data" / "engines"
HOWS = ("measured", "read", "absent")


def cache_dir() -> Path:
    return cache_root() / "learned"


def shipped_path(engine: str, root: Path = SHIPPED) -> Path:
    name, version = split(engine)
    return root / name / f"{version}.json"


def path(engine: str) -> Path | None:
    """The learned file in force for ``engine``: the user's cache first, then the shipped one."""
    for candidate in (shipped_path(engine, cache_dir()), shipped_path(engine)):
        if candidate.exists():
            return candidate
    return None


def learned_releases(name: str) -> list[str]:
    """Every release of engine ``name`` with a learned file (shipped or cached)."""
    found: set[str] = set()
    for root in (SHIPPED, cache_dir()):
        folder = root / name
        if folder.is_dir():
            found.update(f"{name}=={p.stem}" for p in folder.glob("*.json"))
    return sorted(found)


def load(engine: str) -> dict[str, Any] | None:
    """The learned file of ``engine`` (validated), or None when it was never learned.

    Parsed once per file version (its path, modification time and size): the reach and the atlas
    ask for every release's sections thousands of times. The dict is shared: read it, never change it."""
    where = path(engine)
    if where is None:
        return None
    stat = where.stat()
    return _parsed(str(where), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=512)
def _parsed(where: str, mtime_ns: int, size: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(where).read_text())
    problems = validate(data)
    if problems:
        raise ValueError(f"{where}: {problems[0]}")
    return data


def load_from(engine: str, root: Path) -> dict[str, Any] | None:
    """``engine``'s file under ``root`` (not the one in force), or None."""
    target = shipped_path(engine, root)
    return json.loads(target.read_text()) if target.exists() else None


def section(engine: str, name: str) -> dict[str, Any] | None:
    data = load(engine)
    found: dict[str, Any] | None = None if data is None else data["sections"].get(name)
    return found


def write_section(engine: str, name: str, content: Mapping[str, Any], *, root: Path = SHIPPED,
                  wheel: Mapping[str, str] | None = None) -> Path:
    """Replace section ``name`` of ``engine``'s file under ``root``, keeping the other sections.

    Keys are written sorted and indented, so a file learned twice is byte-identical and a diff
    between releases shows only what changed."""
    target = shipped_path(engine, root)
    data: dict[str, Any] = json.loads(target.read_text()) if target.exists() else {
        "engine": engine, "schema": SCHEMA, "sections": {}}
    if wheel is not None:
        data["wheel"] = dict(wheel)
    data["sections"][name] = content
    problems = validate(data)
    if problems:
        raise ValueError(f"{engine}: section {name}: {problems[0]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".json.tmp")  # written whole, then moved: an interrupted write leaves the old file
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(target)
    return target


def drop_section(engine: str, name: str, *, root: Path = SHIPPED) -> None:
    """Remove section ``name`` of ``engine``'s file under ``root``; the file goes when no section is left."""
    target = shipped_path(engine, root)
    if not target.exists():
        return
    data = json.loads(target.read_text())
    data["sections"].pop(name, None)
    if not data["sections"]:
        target.unlink()
        return
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(target)


def is_current(engine: str, sections: tuple[str, ...], learner: str, sha256: str, *, root: Path = SHIPPED) -> bool:
    """True when ``engine``'s file under ``root`` already holds every one of ``sections``, learned
    by ``learner`` (each section's ``"learner"`` value, e.g. ``"sglang-buffers 3"``) from the wheel
    whose hash is ``sha256``: a learner skips such a release (``workbench engines learn --all`` is
    resumable)."""
    target = shipped_path(engine, root)
    if not target.exists():
        return False
    data = json.loads(target.read_text())
    if data.get("wheel", {}).get("sha256") != sha256:
        return False
    found = data.get("sections", {})
    return all(isinstance(found.get(name), dict) and found[name].get("learner") == learner for name in sections)


def wheel_record(wheel: Path) -> dict[str, str]:
    """What a learned file says of the wheel it was learned from: its file name and sha256."""
    import hashlib

    digest = hashlib.sha256()
    with wheel.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return {"file": wheel.name, "sha256": digest.hexdigest()}


def is_fact(value: object) -> bool:
    return isinstance(value, dict) and value.get("how") in HOWS and "value" in value


def validate(data: object) -> list[str]:
    """Every problem with a learned file, as one line each (empty: the file is sound)."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    problems = []
    engine = data.get("engine")
    try:
        split(str(engine))
    except ValueError as err:
        problems.append(str(err))
    if data.get("schema") != SCHEMA:
        problems.append(f"schema: {data.get('schema')!r} (this workbench reads {SCHEMA})")
    sections = data.get("sections")
    if not isinstance(sections, dict):
        return [*problems, "sections: not an object"]
    for name, content in sections.items():
        problems += [f"sections.{name}{where}: {what}" for where, what in _facts_problems(content, "")]
    return problems


def _facts_problems(node: object, where: str) -> list[tuple[str, str]]:
    """Problems with the facts in ``node``: a dict with ``how`` must be a complete fact."""
    if isinstance(node, dict):
        if "how" in node:
            return [(where, problem) for problem in _fact_problems(node)]
        return [p for key, value in node.items() for p in _facts_problems(value, f"{where}.{key}")]
    if isinstance(node, list):
        return [p for i, value in enumerate(node) for p in _facts_problems(value, f"{where}[{i}]")]
    return []


def _fact_problems(fact: Mapping[str, Any]) -> list[str]:
    how = fact.get("how")
    if how not in HOWS:
        return [f"how: {how!r} is not one of {', '.join(HOWS)}"]
    if "value" not in fact:
        return ["a fact needs a value"]
    needs = {"measured": ("function", "states"), "read": ("source", "reason"), "absent": ("reason",)}[str(how)]
    return [f"a {how} fact needs {key!r}" for key in needs if not fact.get(key) and fact.get(key) != 0]
