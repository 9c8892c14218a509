"""Many launch commands checked in one process: ``check_all(records)``, for data sets of real commands.

Each record holds a ``command`` (as published) and may name the ``release`` its source was written
for. A command is checked under that release when it is a listed one, else under the default
(``release_choice``). When the release's parser refuses it and no release was named, it is checked
again under the newest release whose learned parser takes every option of it (the refusal is kept
in the result): a published command is usually written for the release of its day.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.engines import release_choice, releases
from workbench.preflight import BAD_INPUT, CheckResult, PreflightError, check
from workbench.preflight.command import parse_command


@dataclass(frozen=True)
class Outcome:
    id: str
    engine: str  # the engine the command launches ("" when none was found)
    release: str  # the release that answered ("" when none)
    why: str  # "named by the source", "default", "newest release taking its options"
    status: int  # 0, 1, 2 or 3
    verdict: str  # the verdict, or the refusal / bad input message
    refused_by_default: str  # the default release's refusal, when another release answered
    seconds: float
    unmodelled_flags: tuple[str, ...] = ()  # flags of the command the resolution does not list (should be none)


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


def check_one(record: Mapping[str, Any], **options: Any) -> Outcome:
    start = time.perf_counter()
    text = str(record["command"])
    try:
        parsed = parse_command(text)
    except PreflightError as err:
        return Outcome(str(record["id"]), "", "", "", BAD_INPUT, str(err), "", time.perf_counter() - start)
    named = _listed(parsed.engine, record.get("release"))
    status, verdict, result = _answer(text, named, **options)
    release, why, refused = (named or (result.choice.release if result else "")), "named by the source" if named else "default", ""
    if status == BAD_INPUT and named is None and "refuses the command (its parser)" in verdict:
        default = release_choice.choose(parsed.engine, None).release
        older = release_choice.newest_knowing(parsed.engine, parsed.argv, before=default)
        if older is not None:
            refused = verdict
            status, verdict, result = _answer(text, older, **options)
            release, why = older, "newest release taking its options"
    if status == BAD_INPUT and not release:
        release = verdict.split(" refuses", 1)[0] if " refuses the command" in verdict else ""
    return Outcome(str(record["id"]), parsed.engine, release, why, status, verdict, refused, time.perf_counter() - start,
                   _flags_missing(result))


def check_all(records: Iterable[Mapping[str, Any]], **options: Any) -> list[Outcome]:
    return [check_one(record, **options) for record in records]
