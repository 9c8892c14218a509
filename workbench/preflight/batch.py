"""Many launch commands checked in one process: ``check_all(records)``, for data sets of real commands.

Each record holds a ``command`` (as published) and may name the ``release`` its source was written
for. A command is checked under that release when it is a listed one, else under the default
(``release_choice``). When no release was named and the default's parser refuses the command, the
older releases are walked newest first (a published command is usually written for the release of
its day); when the release the source names refuses it, the newer ones are walked oldest first (the
source names a release older than the one it ran: a page "tested with v0.5.7" using an option
0.5.7 does not have). On the walk, one whose learned parser refuses it (an option it does not have,
a value outside an option's choices: ``release_choice.refusal``) is passed over, and one whose
learned parser takes it is asked for real, up to ``tries`` of them; the first whose own parser
accepts the command answers, and the outcome keeps the first refusal and the refusals on the way.
Releases never learned are passed over and counted in the outcome, so "the newest release whose own
parser accepts it" is said of the learned ones. When none accepts, the first refusal stands.

A record whose ``engine`` is a platform plugin of the engine its command launches (``vllm-ascend``
for a ``vllm serve`` command from a vllm-ascend tutorial) was written for that platform's device:
without a ``gpu`` option it is checked on the data file's first accelerator of that platform, as
its reader would pass ``--gpu`` (a tutorial's command need not name the device it was written for).

A record whose text holds several launches (node 0 and node 1, encoders and a language model) is
checked launch by launch, each as above; its outcome keeps each launch's (``launches``) and takes
the worst status (``preflight.launches_verdict``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.engines.commands import release_choice
from workbench.engines.commands.adapters import platform_plugin
from workbench.engines.store import gpus, releases
from workbench.preflight import BAD_INPUT, CheckResult, PreflightError, check, launches_verdict, pick_gpu
from workbench.preflight.command import LaunchCommand, parse_commands

TRIES = 3  # releases around the refusing one asked for real per refused command (each may start an engine process: 7-60 s)
ACCEPTED_OLDER = "newest release whose own parser accepts it"
ACCEPTED_NEWER = "oldest newer release whose own parser accepts it"


@dataclass(frozen=True)
class Outcome:
    id: str
    engine: str  # the engine the command launches ("" when none was found)
    release: str  # the release that answered ("" when none)
    why: str  # "named by the source", "default", ACCEPTED_OLDER, ACCEPTED_NEWER (or their "learned release" forms)
    status: int  # 0, 1, 2 or 3
    verdict: str  # the verdict, or the refusal / bad input message
    refused_by_default: str  # the first release's refusal (the default's or the named one's), when another answered
    seconds: float
    unmodelled_flags: tuple[str, ...] = ()  # flags of the command the resolution does not list (should be none)
    older: tuple[str, ...] = ()  # the older releases asked for real and what their parsers said; the ones passed over
    launch: int = 1  # which launch of the record's text this outcome is of
    launches: tuple[Outcome, ...] = ()  # each launch's, when the text holds several (this one combines them)


def _listed(engine: str, release: str | None) -> str | None:
    if not release:
        return None
    name = f"{engine}=={release}"
    return name if engine in releases.ENGINES and releases.is_listed(name) else None


def _answer(command: str, release: str | None, **options: Any) -> tuple[int, str, CheckResult | None]:
    try:
        result = check(command, engine=release, progress=None, **options)
    except PreflightError as err:
        return BAD_INPUT, str(err), None
    return result.status, result.verdict, result


def _flags_missing(result: CheckResult | None) -> tuple[str, ...]:
    if result is None or result.deployment is None:
        return ()
    settings = result.deployment.settings
    return tuple(f.spelled for f in result.deployment.flags if f.dest not in settings)


def _refused_by_parser(status: int, verdict: str) -> bool:
    return status == BAD_INPUT and "refuses the command (its parser)" in verdict


def check_one(record: Mapping[str, Any], *, tries: int = TRIES, **options: Any) -> Outcome:
    start = time.perf_counter()
    text = str(record["command"])
    try:
        launches = parse_commands(text)
    except PreflightError as err:
        return Outcome(str(record["id"]), "", "", "", BAD_INPUT, str(err), "", time.perf_counter() - start)
    if options.get("gpu") is None:
        options = {**options, "gpu": source_gpu(str(record.get("engine") or ""), launches[0].engine)}
    each = [_check_launch(record, text, parsed, tries, **options) for parsed in launches]
    if len(each) == 1:
        return each[0]
    return _combined(str(record["id"]), each)


def _check_launch(record: Mapping[str, Any], text: str, parsed: LaunchCommand, tries: int, **options: Any) -> Outcome:
    """One launch of the record's text: its named release, else the default, else an older one."""
    start = time.perf_counter()
    options = {**options, "launch": parsed.position}
    named = _listed(parsed.engine, record.get("release"))
    status, verdict, result = _answer(text, named, **options)
    release, why, refused = (named or (result.choice.release if result else "")), "named by the source" if named else "default", ""
    if result is not None and result.choice.instead_of:  # the check itself answered under an older release
        why, refused = ACCEPTED_OLDER, result.choice.instead_of
    older: tuple[str, ...] = ()
    if _refused_by_parser(status, verdict):
        if named is None:
            gpu = pick_gpu(parsed, options.get("gpu"))[0]
            default = release_choice.choose(parsed.engine, None, platform_plugin(parsed.engine, gpu.platform)).release
            around, accepted = release_choice.older_releases(parsed.engine, parsed.argv, before=default), ACCEPTED_OLDER
        else:
            around, accepted = release_choice.newer_releases(parsed.engine, parsed.argv, after=named), ACCEPTED_NEWER
        found, older = _accepting(text, around, accepted, tries, **options)
        if found is not None:
            refused, (release, why, (status, verdict, result)) = verdict, found
            if named is not None:
                why = f"{why} (the source names {named})"
    if status == BAD_INPUT and not release:
        refusing = _REFUSING.search(verdict)
        release = refusing.group(1) if refusing else ""
    return Outcome(str(record["id"]), parsed.engine, release, why, status, verdict, refused, time.perf_counter() - start,
                   _flags_missing(result), older, parsed.position)


_REFUSING = re.compile(r"(\S+==\S+) refuses the command")


def _combined(record_id: str, each: Sequence[Outcome]) -> Outcome:
    """One outcome for a text of several launches: the worst status, each launch's verdict kept."""
    status, verdict = launches_verdict([o.status for o in each])

    def joined(values: Iterable[str]) -> str:
        return ", ".join(dict.fromkeys(v for v in values if v))

    return Outcome(record_id, joined(o.engine for o in each), joined(o.release for o in each), joined(o.why for o in each),
                   status, verdict,
                   "; ".join(f"launch {o.launch}: {o.refused_by_default}" for o in each if o.refused_by_default),
                   sum(o.seconds for o in each), tuple(f for o in each for f in o.unmodelled_flags),
                   tuple(f"launch {o.launch}: {line}" for o in each for line in o.older), 1, tuple(each))


def source_gpu(source_engine: str, engine: str) -> str | None:
    """The first accelerator (``data/gpus.json``) whose platform ``engine`` runs through the plugin
    ``source_engine`` on, when the record's source is that plugin's; None otherwise."""
    if not source_engine or source_engine == engine:
        return None
    return next((name for name in gpus.names() if platform_plugin(engine, gpus.gpu(name).platform) == source_engine), None)


Answer = tuple[int, str, CheckResult | None]
REFUSED_LEARNED = "refused by its learned parser"


def _accepting(text: str, around: Sequence[release_choice.OlderRelease], accepted: str, tries: int,
               **options: Any) -> tuple[tuple[str, str, Answer] | None, tuple[str, ...]]:
    """The first release of ``around`` (in walking order) whose own parser accepts the command, why
    it is said to be the first (``accepted``), and its answer (None when none of the ``tries`` asked
    accepts it); and what was said of the releases on the way: each one asked, and the runs passed
    over (their learned parsers refuse the command, or were never learned)."""
    said: list[tuple[str, list[str]]] = []  # (what, releases): a run passed over, or ("asked", [its refusal])
    asked, unlearned = 0, False
    for candidate in around:
        if candidate.refusal is not None:
            why = release_choice.NOT_LEARNED if candidate.refusal == release_choice.NOT_LEARNED else REFUSED_LEARNED
            unlearned = unlearned or why == release_choice.NOT_LEARNED
            if said and said[-1][0] == why:
                said[-1][1].append(candidate.engine)
            else:
                said.append((why, [candidate.engine]))
            continue
        if asked >= tries:
            said.append(("", [f"not asked: {candidate.engine} and the releases after it in the walk (at most {tries} "
                               "are asked)"]))
            break
        asked += 1
        answer = _answer(text, candidate.engine, suggest=False, **options)
        if not _refused_by_parser(answer[0], answer[1]):
            why = accepted.replace("release", "learned release", 1) if unlearned else accepted
            return (candidate.engine, why, answer), _lines(said)
        said.append(("", [answer[1]]))
    return None, _lines(said)


def _lines(said: list[tuple[str, list[str]]]) -> tuple[str, ...]:
    return tuple(f"passed over ({what}): {_span(found)}" if what else found[0] for what, found in said)


def _span(engines: list[str]) -> str:
    """``sglang==0.5.22 to sglang==0.5.11 (12 releases)``, or the one release."""
    return engines[0] if len(engines) == 1 else f"{engines[0]} to {engines[-1]} ({len(engines)} releases)"


def check_all(records: Iterable[Mapping[str, Any]], *, tries: int = TRIES, **options: Any) -> list[Outcome]:
    return [check_one(record, tries=tries, **options) for record in records]
