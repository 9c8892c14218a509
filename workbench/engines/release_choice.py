"""Which release reads a command, and whose buffer data its rows take: ``choose("sglang", asked)``.

The release is the one asked for (``--engine sglang==0.5.21``, any listed in
``data/engines/releases.json``, or a pseudo-version of ``data/launch_defaults.json`` such as
``sglang==0.5.23+revert-ascend-width``, read by its base release), else the engine installed in
this environment (its version, when listed), else the newest listed. The verdict names it and why.

Buffer data (sizing rules, replays, gathers) exist for the measured releases
(``versions.measured_releases``); a release without its own takes the nearest measured one's
(``releases.nearest``), and says so. What the engine does at run time beyond its arguments (the
scheduler's cap, whether the draft keeps KV: ``data/launch_defaults.json``) is likewise taken from
the nearest release read for it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.engines import learned, releases
from workbench.engines.launch import LaunchVersion, load_launch_data
from workbench.engines.versions import measured_releases


@dataclass(frozen=True)
class Choice:
    asked: str  # the version the check answers for: a release or a pseudo-version
    release: str  # the released code that reads the command (a pseudo-version's base)
    reason: str  # why this one: "--engine", "installed here", "the newest listed"
    buffers: str  # the release whose buffer data the rows take
    notes: tuple[str, ...]  # substitutions, one line each

    @property
    def line(self) -> str:
        """One line for the verdict: the version, why, and any substitution."""
        extra = f"; {'; '.join(self.notes)}" if self.notes else ""
        return f"{self.asked} ({self.reason}){extra}"


def installed(name: str) -> str | None:
    """The version of engine ``name`` installed in this environment, if any."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pseudo_base(asked: str) -> str | None:
    version = load_launch_data().versions.get(asked)
    return version.base if version is not None and version.base else None


def choose(name: str, asked: str | None) -> Choice:
    """The release for a command of engine ``name``; ValueError naming what is allowed."""
    if asked:
        engine, _ = releases.split(asked)
        if engine != name:
            raise ValueError(f"--engine: {asked!r} is a {engine} version, but the command launches {name}")
        base = _pseudo_base(asked)
        if base is None and not releases.is_listed(asked):
            listed = releases.releases(name)
            raise ValueError(f"--engine: {asked!r} is not a listed release (allowed: {name}=={_version(listed[0])} to "
                             f"{name}=={_version(listed[-1])}, data/engines/releases.json)")
        release, reason = base or asked, "--engine"
    else:
        here = installed(name)
        if here is not None and releases.is_listed(f"{name}=={here}"):
            release, reason = f"{name}=={here}", "installed in this environment"
        else:
            release = releases.newest(name)
            reason = "the newest listed release" + (f"; the installed {name} {here} is not listed" if here else
                                                    f"; no {name} installed here")
        asked = release
    measured = measured_releases(name)
    buffers = releases.nearest(measured, release) or release
    notes = () if buffers == release else (
        f"buffer rules of {buffers} ({release} has no buffer data of its own; the nearest measured release)",)
    return Choice(asked, release, reason, buffers, notes)


def offered() -> list[str]:
    """Every version a check can be asked for: the listed releases of the engines read by their own
    code, the pseudo-versions, and the versions the workbench reads itself (vLLM, until its adapter)."""
    from workbench.engines.launch_adapters import ADAPTERS

    read_by_code = [e for name in ADAPTERS for e in releases.releases(name)]
    data = load_launch_data().versions
    return [*read_by_code, *(v for v in data if v not in read_by_code and (data[v].base or v.split("==")[0] not in ADAPTERS))]


def _version(engine: str) -> str:
    return engine.split("==", 1)[1]


def launch_version(choice: Choice) -> LaunchVersion:
    """The version data the rows read: the buffer release's sizing fields (a pseudo-version's own
    over its base's), and the run-time facts of the nearest release read for them."""
    data = load_launch_data()
    if choice.asked in data.versions and data.versions[choice.asked].base:
        pseudo = data.versions[choice.asked]
        return pseudo
    name = releases.split(choice.release)[0]
    read = [v for v in data.versions if releases.split(v)[0] == name and "+" not in v]
    nearest = releases.nearest(read, choice.release)
    facts = data.versions[nearest] if nearest else None
    return LaunchVersion(engine=choice.release, base=choice.buffers if choice.buffers != choice.release else None,
                         pseudo=None, defaults=facts.defaults if facts else {}, reach=facts.reach if facts else {})


@functools.lru_cache(maxsize=64)
def _option_parser(engine: str) -> argparse.ArgumentParser | None:
    """A parser holding the option strings the release's learned ``parser`` section lists (each its
    own destination): argparse's own matching of a command's options against that release's."""
    section = learned.section(engine, "parser") or {}
    options = (section.get("option_strings") or {}).get("value")
    if not options:
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=bool((section.get("abbreviations") or {}).get("value", True)))
    for number, option in enumerate(options):
        parser.add_argument(option, dest=f"option_{number}", nargs="*")
    return parser


def knows_options(engine: str, words: Sequence[str]) -> bool | None:
    """Whether every option in ``words`` is one the release's parser takes (exactly, or as an
    abbreviation argparse accepts); None when the release's parser was never learned."""
    parser = _option_parser(engine)
    if parser is None:
        return None
    with contextlib.redirect_stderr(io.StringIO()):
        for word in words:
            if not word.startswith("-") or word == "--":
                continue
            try:
                found: Any = parser._parse_optional(word)
            except SystemExit:  # ambiguous
                return False
            if isinstance(found, list):
                found = found[0] if len(found) == 1 else None
            if (not found or found[0] is None) and not _looks_negative(word):
                return False
    return True


def _looks_negative(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def newest_knowing(name: str, words: Sequence[str], before: str | None = None) -> str | None:
    """The newest listed release (older than ``before``, when given) whose learned parser takes
    every option of ``words``."""
    listed = list(releases.releases(name))
    if before is not None and before in listed:
        listed = listed[:listed.index(before)]
    return next((engine for engine in reversed(listed) if knows_options(engine, words)), None)
