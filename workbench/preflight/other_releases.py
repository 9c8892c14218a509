"""Which other release's own parser accepts a command one release's parser refused.

A learned parser (``engines.commands.release_choice.refusal``) holds a release's option strings and their
choices, not how many words an option takes nor what a JSON value's fields may be: it can rule a
release out, never in. So a release is named to the user (a refusal's hint) or answers in the
refusing release's place only after its own parser, run in its engine process, has accepted the
command. ``first_accepting`` walks the candidates in order (newest older first, or oldest newer
first), passing over those whose learned parser refuses the command, and asks at most ``tries`` of
the others; ``ask`` is the caller's (the preflight asks an engine process).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from workbench.engines.commands import release_choice

TRIES = 3  # releases asked for real per refused command (each may start an engine process: 7-60 s)
REFUSED_LEARNED = "refused by its learned parser"

Answer = TypeVar("Answer")


@dataclass(frozen=True)
class Asked(Generic[Answer]):
    """What one release's own parser made of the command."""

    accepted: bool  # its parser took the command (its resolution may still refuse or stop)
    answer: Answer | None  # the caller's answer, when accepted
    line: str  # one line: its refusal, or why it could not be asked ("" when accepted)
    asked: bool = True  # False: the release could not be asked (its engine process did not start)


@dataclass(frozen=True)
class Walk(Generic[Answer]):
    release: str | None  # the first release whose own parser accepted the command (None: none asked did)
    answer: Answer | None
    said: tuple[str, ...]  # each release asked and its refusal, and the runs passed over, in walking order
    asked: tuple[str, ...]  # the releases whose own parsers were asked


def first_accepting(candidates: Sequence[release_choice.OlderRelease], ask: Callable[[str], Asked[Answer]], *,
                    tries: int = TRIES) -> Walk[Answer]:
    """The first of ``candidates`` (in their order) whose own parser accepts the command."""
    said: list[tuple[str, list[str]]] = []  # (why passed over, releases), or ("", [what one asked said])
    asked: list[str] = []
    for candidate in candidates:
        if candidate.refusal is not None:
            why = release_choice.NOT_LEARNED if candidate.refusal == release_choice.NOT_LEARNED else REFUSED_LEARNED
            if said and said[-1][0] == why:
                said[-1][1].append(candidate.engine)
            else:
                said.append((why, [candidate.engine]))
            continue
        if len(asked) >= tries:
            said.append(("", [f"not asked: {candidate.engine} and the releases after it (at most {tries} are asked)"]))
            break
        outcome = ask(candidate.engine)
        if outcome.asked:
            asked.append(candidate.engine)
        if outcome.accepted:
            return Walk(candidate.engine, outcome.answer, _lines(said), tuple(asked))
        said.append(("", [outcome.line]))
    return Walk(None, None, _lines(said), tuple(asked))


def _lines(said: list[tuple[str, list[str]]]) -> tuple[str, ...]:
    return tuple(f"passed over ({what}): {_span(found)}" if what else found[0] for what, found in said)


def _span(engines: list[str]) -> str:
    """``sglang==0.5.22 to sglang==0.5.11 (12 releases)``, or the one release."""
    return engines[0] if len(engines) == 1 else f"{engines[0]} to {engines[-1]} ({len(engines)} releases)"
