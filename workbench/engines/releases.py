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

RELEASES_FILE = Path(__file__).resolve().parents[2] / "data" / "engines" / "releases.json"
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


def with_plugin(name: str, plugin: str, path: Path = RELEASES_FILE) -> tuple[str, ...]:
    """The listed releases of engine ``name`` that ``plugin`` (vllm-ascend) has a release of the same
    version for, oldest first: the ones that run on the device the plugin brings."""
    return tuple(r for r in releases(name, path) if is_listed(f"{plugin}=={split(r)[1]}", path))


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
    keeping each engine's starting release and dropping pre-releases after it."""
    import datetime

    current = _load(str(path))
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
                and (version_key(v)[1] == 3 or v == versions[0])]
        found[name] = sorted(kept, key=version_key)
    data = json.loads(path.read_text())
    data["engines"] = found
    data["listed_on"] = day or datetime.date.today().isoformat()
    path.write_text(json.dumps(data, indent=2) + "\n")
    _load.cache_clear()
    return found
