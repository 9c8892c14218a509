"""Every release of each engine the workbench answers for, and how they order.

``data/engines/releases.json`` lists them oldest first, as the package index listed them on the
day it was written (``refresh`` rewrites it). A release is named ``NAME==VERSION``
(``sglang==0.5.21``); versions compare as the index orders them (PEP 440, so ``0.5.0rc2`` comes
before ``0.5.1`` and ``0.5.15.post1`` after ``0.5.15``).

Worked example: with learned data for ``sglang==0.5.10`` and ``sglang==0.5.14`` only,
``nearest(["sglang==0.5.10", "sglang==0.5.14"], "sglang==0.5.12")`` is ``sglang==0.5.10``: the
newest learned release not after the one asked for (its code is the closest that already existed),
and the oldest learned one when every learned release is newer.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

RELEASES_FILE = Path(__file__).resolve().parents[3] / "data" / "engines" / "releases.json"
ENGINES = ("sglang", "vllm", "vllm-ascend")

_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?$")


def version_key(version: str) -> tuple[tuple[int, ...], int, int, int]:
    """A sort key ordering versions as the package index does (final after its pre-releases,
    ``.postN`` after the final). ValueError for a version that is not of that form."""
    match = _VERSION.match(version)
    if not match:
        raise ValueError(f"{version!r} is not a release version (e.g. 0.5.21, 0.5.15.post1, 0.5.0rc2)")
    release, pre, pre_n, post = match.groups()
    pre_rank = {"a": 0, "b": 1, "rc": 2}.get(pre or "", 3)
    return tuple(int(p) for p in release.split(".")), pre_rank, int(pre_n or 0), int(post or -1)


def split(engine: str) -> tuple[str, str]:
    """``("sglang", "0.5.21")`` of ``"sglang==0.5.21"``; ValueError naming the form otherwise."""
    name, sep, version = engine.partition("==")
    if not sep or not name or not version:
        raise ValueError(f"engine: {engine!r} is not NAME==VERSION (e.g. sglang==0.5.21)")
    return name, version


@functools.lru_cache(maxsize=2)
def _load(path: str) -> dict[str, tuple[str, ...]]:
    data = json.loads(Path(path).read_text())
    return {name: tuple(versions) for name, versions in data["engines"].items()}


def releases(name: str, path: Path = RELEASES_FILE) -> tuple[str, ...]:
    """Every listed release of engine ``name`` as ``NAME==VERSION``, oldest first."""
    listed = _load(str(path))
    if name not in listed:
        raise ValueError(f"engine: {name!r} is not one of {', '.join(listed)}")
    return tuple(f"{name}=={v}" for v in listed[name])


def is_listed(engine: str, path: Path = RELEASES_FILE) -> bool:
    name, _ = split(engine)
    return name in _load(str(path)) and engine in releases(name, path)


def is_final(version: str) -> bool:
    """Not a pre-release: ``0.23.0`` and ``0.23.0.post1``, not ``0.21.0rc1``."""
    return version_key(version)[1] == 3


def paired(plugin: str, version: str, path: Path = RELEASES_FILE) -> str | None:
    """The listed release of ``plugin`` (vllm-ascend) that runs over the engine release ``version``:
    the plugin's release of that version, else its newest pre-release of it (vllm-ascend publishes
    most versions only as release candidates: ``0.21.0rc1`` for vLLM 0.21.0); None when it has neither."""
    if is_listed(f"{plugin}=={version}", path):
        return f"{plugin}=={version}"
    wanted = version_key(version)[0]
    candidates = [r for r in releases(plugin, path) if version_key(split(r)[1])[0] == wanted
                  and not is_final(split(r)[1])]
    return candidates[-1] if candidates else None


def with_plugin(name: str, plugin: str, path: Path = RELEASES_FILE, *, finals: bool = False) -> tuple[str, ...]:
    """The listed releases of engine ``name`` that ``plugin`` (vllm-ascend) has a release for
    (``paired``), oldest first: the ones that run on the device the plugin brings; with ``finals``
    only those whose plugin release is a final one."""
    found = ((r, paired(plugin, split(r)[1], path)) for r in releases(name, path))
    return tuple(r for r, p in found if p is not None and (not finals or is_final(split(p)[1])))


def newest(name: str, path: Path = RELEASES_FILE) -> str:
    return releases(name, path)[-1]


def nearest(candidates: Iterable[str], engine: str) -> str | None:
    """The candidate release whose data stands in for ``engine``: ``engine`` itself when it is a
    candidate, else the newest candidate of the same engine not after it, else the oldest one
    after it; None when no candidate is of that engine."""
    name, version = split(engine)
    same = sorted((c for c in candidates if split(c)[0] == name), key=lambda c: version_key(split(c)[1]))
    if not same:
        return None
    if engine in same:
        return engine
    wanted = version_key(version)
    before = [c for c in same if version_key(split(c)[1]) <= wanted]
    return before[-1] if before else same[0]


def refresh(path: Path = RELEASES_FILE, day: str | None = None) -> dict[str, list[str]]:
    """Rewrite the release list from the package index (``pip index versions NAME --pre``),
    keeping each engine's starting release and dropping pre-releases after it, except for the
    engines the file's ``pre_releases_kept`` names: of those, the newest pre-release of each version
    with no final release is kept (``paired``)."""
    import datetime

    current = _load(str(path))
    keep_pre = set(json.loads(path.read_text()).get("pre_releases_kept", []))
    found: dict[str, list[str]] = {}
    for name, versions in current.items():
        first = version_key(versions[0])
        done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, "--pre"],
                              capture_output=True, text=True, timeout=120)
        line = next((x for x in done.stdout.splitlines() if x.startswith("Available versions:")), None)
        if done.returncode != 0 or line is None:
            raise RuntimeError(f"pip index versions {name}: {done.stderr.strip().splitlines()[-1:] or 'no answer'}")
        listed = [v.strip() for v in line.split(":", 1)[1].split(",")]
        kept = [v for v in listed if _VERSION.match(v) and version_key(v) >= first
                and (is_final(v) or v == versions[0] or (name in keep_pre and _newest_pre_without_final(v, listed)))]
        found[name] = sorted(kept, key=version_key)
    data = json.loads(path.read_text())
    data["engines"] = found
    data["listed_on"] = day or datetime.date.today().isoformat()
    path.write_text(json.dumps(data, indent=2) + "\n")
    _load.cache_clear()
    return found


def _newest_pre_without_final(version: str, listed: Iterable[str]) -> bool:
    """Whether ``version`` is the newest pre-release of its version and ``listed`` has no final of it."""
    if is_final(version):
        return False
    same = [v for v in listed if _VERSION.match(v) and version_key(v)[0] == version_key(version)[0]]
    return not any(is_final(v) for v in same) and max(same, key=version_key) == version
