"""The preflight box's answer as a person reads it: the verdict and the fix first, the rest folded.

``checked`` runs one check as ``workbench check`` does (every launch of a text holding several)
and keeps what each launch gave, the engine's refusal included; ``answer_html`` draws it:

1. one line per launch that leads with the verdict's word, in the words and colours of the report and
   the atlas (``workbench.present.words``), then what fails where and the fix the check prints for
   that row (``fix: ...``); the line wraps, it never scrolls sideways;
2. the release hint, when there is one: the release the check answered under instead of the one
   that refuses the command, or another release whose own parser accepts a refused command;
3. one short line per row;
4. the printed check, exactly what ``workbench check`` prints, folded (``<details>``): its columns
   are kept, so that part scrolls sideways.

The model's config comes from the Hugging Face cache (``HF_HUB_CACHE`` and its kin, as the check
reads them), from the hub where the check may fetch it, or from a config file given
(``model_config``, the command line's ``--model-config``; a folder stands for its ``config.json``).
``offline`` is the command line's ``--offline``: nothing is fetched from the hub.

Plain functions of their arguments, so the tests call them without a kernel.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workbench.preflight import BAD_INPUT, FAILS, SAFE, CheckResult, PreflightError, Refused, check, check_launches
from workbench.preflight.command import parse_commands
from workbench.preflight.format import fix_text, format_launches_text, format_text
from workbench.preflight.rows import Row
from workbench.present.words import COLOURS, NOT_APPLICABLE, PAST_REACH, REFUSED, TEXT_COLOURS, failure_word
from workbench.present.words import SAFE as SAFE_WORD

# Two answers the report's words do not cover: the check could not decide, or it could not read its input.
UNDECIDED_WORD = "undecided"
BAD_INPUT_WORD = "bad input"
# The check reads where to find models from the process's environment: one check at a time changes it.
LOOKUP_LOCK = threading.Lock()


@dataclass(frozen=True)
class Answer:
    """One check of a text: its exit status, what ``workbench check`` prints, and what each launch
    gave (its result, or the error that stopped it); ``launches`` > 1 for a text holding several."""

    status: int
    text: str
    results: tuple[CheckResult | PreflightError, ...]
    launches: int
    verdict: str  # the text's verdict when it holds several launches ("REFUSED: 2 launches: ...")

    @property
    def checks(self) -> list[CheckResult]:
        return [r for r in self.results if isinstance(r, CheckResult)]


def config_file(value: str) -> str | None:
    """The model config field as the check takes it: empty is none, a folder is its ``config.json``."""
    given = value.strip()
    if not given:
        return None
    path = Path(given).expanduser()
    return str(path / "config.json") if path.is_dir() else str(path)


@contextmanager
def hub_offline(offline: bool) -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` for the check inside (as ``workbench check --offline``), restored after."""
    before = os.environ.get("HF_HUB_OFFLINE")
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if offline and before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        elif offline and before is not None:
            os.environ["HF_HUB_OFFLINE"] = before


@contextmanager
def models_from(hf_cache: str | Path) -> Iterator[None]:
    """The checks inside look models up in ``hf_cache`` (``HF_HUB_CACHE``), restored after; the
    box's own checks wait meanwhile (``LOOKUP_LOCK``)."""
    with LOOKUP_LOCK:
        before = os.environ.get("HF_HUB_CACHE")
        os.environ["HF_HUB_CACHE"] = str(hf_cache)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("HF_HUB_CACHE", None)
            else:
                os.environ["HF_HUB_CACHE"] = before


def checked(command: str, engine: str = "", model_config: str = "", offline: bool = False) -> Answer:
    """One check, as ``workbench check`` gives it: one result per launch the engine read (a text may
    hold several, each checked); bad input is status 2 and its one line, never a traceback."""
    asked = engine.strip() or None
    with LOOKUP_LOCK, hub_offline(offline):
        try:
            config = config_file(model_config)
            if parse_commands(command)[0].launches > 1:
                every = check_launches(command, engine=asked, model_config=config, progress=None)
                return Answer(every.status, format_launches_text(every), every.results, len(every.results), every.verdict)
            result: CheckResult = check(command, engine=asked, model_config=config, progress=None)
        except PreflightError as err:
            return Answer(BAD_INPUT, f"error: {err}", (err,), 1, str(err))
    return Answer(result.status, format_text(result), (result,), 1, result.verdict)


def status_of(result: CheckResult | PreflightError) -> int:
    return result.status if isinstance(result, CheckResult) else BAD_INPUT


def row_word(row: Row) -> str:
    """A preflight row's word, as the atlas says it: a failure a run reaches is loud or silent."""
    if row.reachable:
        return failure_word(row.outcome)
    return SAFE_WORD if row.first_failing is None else PAST_REACH


def result_word(result: CheckResult | PreflightError) -> str:
    """A launch's word: its first reached row's (loud or silent), safe, undecided, or for input the
    check did not run, refused (the release's own code refuses the command) or bad input."""
    if isinstance(result, Refused):
        return REFUSED
    if isinstance(result, PreflightError):
        return BAD_INPUT_WORD
    if result.status == FAILS:
        return row_word(next(r for r in result.rows if r.reachable))
    return SAFE_WORD if result.status == SAFE else UNDECIDED_WORD


def badge(word: str) -> str:
    background = COLOURS.get(word, COLOURS[NOT_APPLICABLE])
    text = TEXT_COLOURS.get(word, TEXT_COLOURS[NOT_APPLICABLE])
    return (f'<span class="workbench-word" style="background:{background};color:{text};padding:1px 6px;'
            f'border-radius:3px;font-weight:bold;white-space:nowrap">{html.escape(word)}</span>')


def _where(row: Row) -> str:
    return f"{row.buffer} ({row.backend}), {row.mode}"


def summary(result: CheckResult | PreflightError) -> tuple[str, str | None]:
    """What a launch's answer says after its word, and the fix (None: no fix to give)."""
    if isinstance(result, Refused):
        by = "its parser" if result.by == "parser" else result.by
        return f"{result.release} refuses the command ({by}): {result.message}", None
    if isinstance(result, PreflightError):
        return str(result), None
    if result.status == FAILS:
        row = next(r for r in result.rows if r.reachable)
        at = f"at committed length {row.first_failing:,}" if row.first_failing is not None else "at every length"
        reach = f"; a run reaches {row.reach:,}" if row.reach is not None else ""
        fix = fix_text(row)
        return (f"{_where(row)}: {row.outcome} {at}{reach}",
                fix[len("fix: "):] if fix else "none the workbench knows for this buffer (see the rows)")
    if result.status == SAFE:
        margins = [r for r in result.rows if r.margin is not None]
        if not margins:
            return "no row fails at any committed length the request table holds", None
        row = min(margins, key=lambda r: r.margin if r.margin is not None else 0)
        if row.margin is not None and row.margin < 0:
            return (f"no row a run reaches fails; {_where(row)} fails at {row.first_failing:,} only for a batch the "
                    "KV pool cannot hold"), None
        return (f"no row a run reaches fails; the nearest, {_where(row)}, fails at {row.first_failing:,}, "
                f"{row.margin:,} tokens past what a run reaches"), None
    return result.verdict.removeprefix("UNDECIDED: "), None


def release_hint(result: CheckResult | PreflightError) -> str | None:
    """Another release to read the command with: the one a refused command's hint names, or the
    one the check answered under because the newest refuses it."""
    if isinstance(result, Refused):
        return result.hint.strip().removeprefix("(").removesuffix(")") or None
    if isinstance(result, CheckResult) and result.choice.instead_of:
        return f"answered under {result.choice.release}: {result.choice.instead_of}"
    return None


def headline_html(result: CheckResult | PreflightError, launch: int | None = None) -> str:
    """One wrapped line: the word, what fails where, the fix; the release hint under it."""
    said, fix = summary(result)
    which = f"launch {launch}: " if launch is not None else ""
    fixed = f' <span class="workbench-fix"><b>Fix:</b> {html.escape(fix)}</span>' if fix else ""
    line = (f'<div class="workbench-answer" style="white-space:normal;overflow-wrap:anywhere;line-height:1.5;'
            f'margin:4px 0">{badge(result_word(result))} {html.escape(which + said)}.{fixed}</div>')
    hint = release_hint(result)
    if hint:
        line += (f'<div class="workbench-hint" style="white-space:normal;overflow-wrap:anywhere;margin:2px 0 4px 0">'
                 f"<b>Release:</b> {html.escape(hint)}</div>")
    return line


def rows_html(result: CheckResult) -> str:
    """One short line per row, each led by its word in its colour."""
    lines = []
    for row in result.rows:
        where = f" at {row.first_failing:,} (a run reaches {row.reach:,})" if row.first_failing is not None and row.reach else ""
        lines.append(f"<li>{badge(row_word(row))} {html.escape(_where(row))}{html.escape(where)}</li>")
    return f"<ul class='workbench-rows' style='margin:2px 0;white-space:normal'>{''.join(lines)}</ul>" if lines else ""


def answer_html(answer: Answer) -> str:
    """The answer: each launch's line (the text's verdict first when it holds several) and rows,
    then the printed check folded."""
    parts = []
    if answer.launches > 1:  # the text's word is its worst launch's
        worst = next(r for r in answer.results if status_of(r) == answer.status)
        parts.append(f'<div class="workbench-answer" style="white-space:normal;overflow-wrap:anywhere;margin:4px 0">'
                     f"{badge(result_word(worst))} <b>{html.escape(answer.verdict)}</b></div>")
    for position, result in enumerate(answer.results, 1):
        parts.append(headline_html(result, position if answer.launches > 1 else None))
        if isinstance(result, CheckResult):
            parts.append(rows_html(result))
    printed = html.escape(f"exit status {answer.status}\n{answer.text}")
    parts.append('<details style="margin-top:4px"><summary>the full check (what <code>workbench check</code> prints)'
                 f'</summary><pre class="workbench-outcome" style="white-space:pre;overflow-x:auto;margin:4px 0">'
                 f"{printed}</pre></details>")
    return "".join(parts)
