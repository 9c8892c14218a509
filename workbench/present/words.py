"""One word and one colour per verdict, shared by every view: the report, the atlas, the notebooks'
tables and figures, and the preflight box.

A verdict says what a real run meets, so it needs the reach (how far a run gets; see
``docs/glossary.md#reach``) as well as the first failing length:

* **fails loudly**: a run reaches a step that raises (torch's shape or index error, the engine's
  own host check, numpy's error on the step's scheduled counts): the server stops with an error;
* **fails silently**: a run reaches a step that raises nothing but reads or writes past a buffer
  (``silent-overread``, ``silent-overwrite``): wrong tokens, or another request's KV corrupted;
* **fails past reach**: a step fails, but only at lengths past what a run reaches (a margin);
* **safe**: no committed length the request table holds fails;
* **no reachable failure**: nothing fails up to what a run reaches, and lengths past it were not
  searched (the notebooks' sweeps, which stop at the reach);
* **refused at start-up**: the release's own start-up checks refuse every setting there (its
  learned ``startup`` section, ``engines/commands/startup_learn.py``): no run starts, so none can fail;
* **n/a**: no such state (a speculative mode without draft tokens, a graph a backend lacks).
"""

from __future__ import annotations

from workbench.atlas.findings import SILENT_OUTCOMES

SAFE = "safe"
NO_REACHABLE_FAILURE = "no reachable failure"
PAST_REACH = "fails past reach"
LOUD = "fails loudly"
SILENT = "fails silently"
REFUSED = "refused at start-up"
NOT_APPLICABLE = "n/a"

# The order of every legend and colour bar: best first; the two that are no run last.
WORDS = (SAFE, NO_REACHABLE_FAILURE, PAST_REACH, LOUD, SILENT, REFUSED, NOT_APPLICABLE)
COLOURS = {
    SAFE: "#2e7d32", NO_REACHABLE_FAILURE: "#81c784", PAST_REACH: "#64b5f6", LOUD: "#c62828", SILENT: "#ef6c00",
    REFUSED: "#455a64", NOT_APPLICABLE: "#d9d9d9",
}
# Text drawn on a cell of that colour: dark on the light colours, white on the dark ones.
TEXT_COLOURS = {SAFE: "white", NO_REACHABLE_FAILURE: "black", PAST_REACH: "black", LOUD: "white", SILENT: "black",
                REFUSED: "white", NOT_APPLICABLE: "black"}

DESIGNED_OUTCOMES = ("ok", "out-of-memory")  # out of memory is the allocator's designed answer, not a failure


def failure_word(outcome: str) -> str:
    """A failing step's outcome as the word for a run that reaches it: loud or silent."""
    return SILENT if outcome in SILENT_OUTCOMES else LOUD


def outcome_word(outcome: str) -> str:
    """An executed outcome within reach: ``ok`` and out-of-memory are no failure, the rest loud or silent."""
    return NO_REACHABLE_FAILURE if outcome in DESIGNED_OUTCOMES else failure_word(outcome)


def status_word(status: str, outcome: str | None) -> str:
    """An atlas row's status (``safe``, ``unreachable``, ``reachable``, ``refused``) and outcome as its word."""
    if status == "refused":
        return REFUSED
    if status == "safe":
        return SAFE
    if status == "unreachable":
        return PAST_REACH
    if status == "reachable":
        return failure_word(str(outcome))
    raise ValueError(f"status: {status!r} is not one of safe, unreachable, reachable, refused")


def css_class(word: str) -> str:
    """The HTML class of a word (``fails loudly`` -> ``v-fails-loudly``)."""
    return "v-" + word.replace("/", "").replace(" ", "-")


def css_rules() -> str:
    """One CSS rule per word: its colour as a cell background, and its text colour."""
    return " ".join(f".{css_class(w)} {{ background: {COLOURS[w]}; color: {TEXT_COLOURS[w]}; }}" for w in WORDS)
