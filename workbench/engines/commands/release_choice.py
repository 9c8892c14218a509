"""Which release reads a command, and whose buffer data its rows take: ``choose("sglang", asked)``.

The release is the one asked for (``--engine sglang==0.5.21``, any listed in
``data/engines/releases.json``, or a pseudo-version of ``data/launch_defaults.json`` such as
``sglang==0.5.23+revert-ascend-width``, read by its base release), else the engine installed in
this environment (its version, when listed), else the newest listed; on a device the engine runs
through a platform plugin (vLLM on an Ascend NPU: vllm-ascend), the newest listed release that the
plugin has a release of the same version for. The verdict names it and why.

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

from workbench.engines.store import learned, releases
from workbench.engines.store.launch_defaults import LaunchVersion, load_launch_data
from workbench.engines.store.versions import measured_releases


@dataclass(frozen=True)
class Choice:
    asked: str  # the version the check answers for: a release or a pseudo-version
    release: str  # the released code that reads the command (a pseudo-version's base)
    reason: str  # why this one: "--engine", "installed here", "the newest listed"
    buffers: str  # the release whose buffer data the rows take
    notes: tuple[str, ...]  # substitutions, one line each
    instead_of: str = ""  # the newest release and its parser's refusal, when an older one answers in its place

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


def choose(name: str, asked: str | None, plugin: str | None = None) -> Choice:
    """The release for a command of engine ``name``; ValueError naming what is allowed. ``plugin``:
    the package the engine runs through on the command's device (vllm-ascend on an NPU): unless a
    release is asked for, the newest release that package has a final release of the same version for."""
    if asked:
        engine, _ = releases.split(asked)
        if engine != name:
            raise ValueError(f"--engine: {asked!r} is a {engine} version, but the command launches {name}")
        base = _pseudo_base(asked)
        indexed = base is None and not releases.is_listed(asked)
        if indexed:
            _on_the_index(name, asked)
        release, reason = base or asked, "--engine" + (", a release the package index has and "
                                                       "data/engines/releases.json does not list" if indexed else "")
    else:
        here = installed(name)
        # a release candidate of the plugin is checked when asked for; the default runs over its final releases
        paired = releases.with_plugin(name, plugin, finals=True) if plugin else ()
        if here is not None and releases.is_listed(f"{name}=={here}"):
            release, reason = f"{name}=={here}", "installed in this environment"
        elif paired:
            release = paired[-1]
            reason = (f"the newest listed release {plugin} has a final release for (this device runs it through "
                      f"{plugin}; give --engine for one of its release candidates)")
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


def _on_the_index(name: str, asked: str) -> None:
    """Nothing when the package index has release ``asked`` of ``name``; ValueError naming what is allowed."""
    from workbench.engines.store.index_versions import IndexUnavailable, index_versions

    listed = releases.releases(name)
    allowed = (f"a listed release, {name}=={_version(listed[0])} to {name}=={_version(listed[-1])} "
               "(data/engines/releases.json), or any other the package index has")
    version = _version(asked)
    try:
        releases.version_key(version)
        found = index_versions(name)
    except ValueError as err:
        raise ValueError(f"--engine: {asked!r}: {err} (allowed: {allowed})") from None
    except IndexUnavailable as err:
        raise ValueError(f"--engine: {asked!r} is not a listed release, and {err} (allowed: {allowed})") from None
    if version not in found:
        near = [v for v in found if releases.version_key(v)[0] == releases.version_key(version)[0]]
        said = f"; of {version.split('rc')[0]} it has {', '.join(near)}" if near else ""
        raise ValueError(f"--engine: the package index has no {asked}{said} (allowed: {allowed})")


def offered() -> list[str]:
    """Every version a check can be asked for: the listed releases of the engines read by their own
    code, the pseudo-versions, and the versions the workbench reads itself (vLLM, until its adapter)."""
    from workbench.engines.commands.adapters import ADAPTERS

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


NOT_LEARNED = "its parser was never learned"


@dataclass(frozen=True)
class _LearnedParser:
    """A release's parser as its learned ``parser`` section describes it: an argparse parser holding
    its option strings (each its own destination), for argparse's own matching of a command's
    options (abbreviations included), and the values each option with fixed choices takes."""

    parser: argparse.ArgumentParser
    choices: dict[str, frozenset[str]]


@functools.lru_cache(maxsize=128)
def _learned_parser(engine: str) -> _LearnedParser | None:
    section = learned.section(engine, "parser") or {}
    options = (section.get("option_strings") or {}).get("value")
    if not options:
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=bool((section.get("abbreviations") or {}).get("value", True)))
    for number, option in enumerate(options):
        parser.add_argument(option, dest=f"option_{number}", nargs="*")
    choices = (section.get("choices") or {}).get("value") or {}
    return _LearnedParser(parser, {option: frozenset(values) for option, values in choices.items()})


def refusal(engine: str, words: Sequence[str]) -> str | None:
    """Why the release's learned parser would refuse ``words``: an option it does not have (or an
    ambiguous abbreviation), or a value that is not one of an option's choices; ``NOT_LEARNED`` when
    its parser was never learned; None when it takes every option and value of ``words``.

    A value is checked only against choices the learned file holds (options whose words argparse
    compares as written); a release learned before the choices were is checked by option names alone."""
    learned_parser = _learned_parser(engine)
    if learned_parser is None:
        return NOT_LEARNED
    with contextlib.redirect_stderr(io.StringIO()):
        for position, word in enumerate(words):
            if blank(word) and (position == 0 or not words[position - 1].startswith("-")):
                # no option's value: a stray argument (a backslash followed by spaces gives one) that
                # every release's parser refuses; the learned parser holds options only
                return f"{word!r} is an argument no option of it takes"
            if not word.startswith("-") or word == "--":
                continue
            try:
                found: Any = learned_parser.parser._parse_optional(word)
            except SystemExit:
                return f"{word.split('=', 1)[0]} is an ambiguous abbreviation of its options"
            if isinstance(found, list):  # Python 3.12.7+: a list of candidate tuples
                found = found[0] if len(found) == 1 else None
            if not found or found[0] is None:
                if _looks_negative(word):
                    continue
                return f"{word.split('=', 1)[0]} is not one of its options"
            option, explicit = found[1], found[-1]  # (action, option, [sep,] explicit value)
            allowed = learned_parser.choices.get(option)
            value = explicit if explicit is not None else (words[position + 1] if position + 1 < len(words) else None)
            if value is not None and explicit is None and value.startswith("-"):
                value = None  # no value follows: argparse's own error, or an optional value left out
            if allowed is not None and value is not None and value not in allowed:
                return f"{value!r} is not one of the choices of {option}"
    return None


def blank(word: str) -> bool:
    """A word of spaces only: what the shell passes for a backslash followed by spaces
    (``--tp 1 \\   # comment``), an argument no parser's option takes."""
    return bool(word) and not word.strip()


def _looks_negative(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class OlderRelease:  # older or newer: a release around the one that refused a command
    engine: str
    refusal: str | None  # why its learned parser refuses the command (NOT_LEARNED: never learned); None: it takes it


def older_releases(name: str, words: Sequence[str], before: str) -> list[OlderRelease]:
    """Every listed release of engine ``name`` older than ``before``, newest first, each with what
    its learned parser makes of ``words``: the releases whose own parser may accept the command are
    those with no refusal (to be confirmed by that parser), and those never learned."""
    listed = list(releases.releases(name))
    older = listed[:listed.index(before)] if before in listed else listed
    return [OlderRelease(engine, refusal(engine, words)) for engine in reversed(older)]


def newer_releases(name: str, words: Sequence[str], after: str) -> list[OlderRelease]:
    """Every listed release of engine ``name`` newer than ``after``, oldest first, each with what its
    learned parser makes of ``words`` (as ``older_releases``)."""
    listed = list(releases.releases(name))
    newer = listed[listed.index(after) + 1:] if after in listed else []
    return [OlderRelease(engine, refusal(engine, words)) for engine in newer]


def oldest_newer_taking(name: str, words: Sequence[str], after: str) -> str | None:
    """The oldest release newer than ``after`` whose learned parser takes every option and value of
    ``words``: for a command written for a release that refuses it (an option or a value added
    later), the first release to try (a hint, as ``newest_taking``)."""
    return next((r.engine for r in newer_releases(name, words, after) if r.refusal is None), None)


def newest_taking(name: str, words: Sequence[str], before: str) -> str | None:
    """The newest release older than ``before`` whose learned parser takes every option and value
    of ``words`` (a hint: only that release's own parser can say it accepts the command)."""
    return next((r.engine for r in older_releases(name, words, before) if r.refusal is None), None)
