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


def marker_word(outcome: str) -> str:
    """A drawn step's word (a marker of the allocator's map, a failing step of a request's trace): as
    ``outcome_word``, and "n/a" for a state the engine cannot be in (``invalid``: nothing ran)."""
    return NOT_APPLICABLE if outcome == "invalid" else outcome_word(outcome)


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


# How a step fails, in a reviewer's words (the outcome's name is kept after a colon for a search).
OUTCOME_PHRASES = {
    "ok": "runs", "out-of-memory": "the allocator reports out of memory (its designed answer)",
    "shape-error": "the step raises a shape error", "index-error": "the step raises an index error",
    "host-assert": "the engine's own host check stops the step", "host-error": "the step raises on the host",
    "silent-overread": "a kernel reads past the buffer", "silent-overwrite": "a replay writes past the buffer",
    "invalid": "not a valid configuration",
}


def outcome_phrase(outcome: str) -> str:
    """An executed outcome as a phrase a reviewer reads, with the outcome's own name after it."""
    phrase = OUTCOME_PHRASES.get(outcome)
    return f"{phrase} ({outcome})" if phrase else outcome


def legend_name(word: str, outcome: str | None = None) -> str:
    """A legend entry: the word, and after a colon the outcome when one word covers several."""
    if word not in COLOURS:
        raise ValueError(f"word: {word!r} is not one of {', '.join(WORDS)}")
    return f"{word}: {outcome}" if outcome else word


def word_of_legend(name: str) -> str:
    """The word a legend entry (``legend_name``) starts with; ValueError when it starts with none."""
    for word in sorted(WORDS, key=len, reverse=True):
        if name == word or name.startswith(word + ": "):
            return word
    raise ValueError(f"legend entry {name!r} does not start with one of {', '.join(WORDS)}")


# The page's own glossary: every term the report's first screen uses, in the order a reader meets it
# (anchor, term, meaning). The report draws it as a section and links each term to it.
GLOSSARY = (
    ("what-happens", "what happens", f"{LOUD}: a run reaches a step that raises, and the server stops with an error. "
     f"{SILENT}: a run reaches a step that raises nothing while a kernel reads or a replay writes past the "
     "buffer: wrong tokens, or another request's KV cache corrupted."),
    ("committed-length", "committed length", "the tokens a request has in its KV cache when a step runs "
     "(written s elsewhere)."),
    ("first-failing", "fails from", "the first committed length whose step fails, in the worst setting."),
    ("reach", "a run reaches", "the longest committed length a real run gets to: the context length minus one, "
     "plus what the scheduler lets a request run past it (its speculative overshoot)."),
    ("margin", "margin", "first failing length minus reach minus one: negative, a run gets there; zero or more, "
     f"the failure lies past reach ({PAST_REACH})."),
    ("worst-setting", "when", "the setting (model, speculation, context, page size, batch, KV pool) with the "
     "smallest margin among the settings the atlas ran for that backend and mode."),
    ("recipe", "speculation", "how draft tokens are made: NGRAM, EAGLE with its draft steps and top-k, or the "
     "model's own speculation (the model preset's own draft tokens, steps and top-k)."),
    ("page-size", "page size", "KV tokens per page (--page-size; vLLM's block size)."),
    ("draft-tokens", "draft tokens", "tokens each verify checks per request (--speculative-num-draft-tokens)."),
    ("kv-pool", "KV pool", "the KV cache's tokens the server holds for all requests; its bytes are what the "
     "fix's cost is a share of."),
    ("request-slot", "request slots", "rows of the graph buffers: the largest batch the captured graph serves "
     "(max_bs); a per-request cost is paid once per slot."),
    ("fix", "fix", "size the buffer so it holds every length the request table holds (all the tokens a "
     "request can have); its cost is what that size takes over the release's own."),
    ("fixed-in", "fixed in", "the first later release of the same engine whose row a run no longer breaks "
     "(a release that refuses the setting at start-up fixes nothing); unfixed: every later release the atlas "
     "ran still breaks, up to the newest it knows."),
    ("reproduced", "reproduced", "the row run again: a seeded serving run (or a batch walk over the pooled "
     "buffer) met the failure where the row says (yes), or did not (NO)."),
)
GLOSSARY_TERMS = {anchor: term for anchor, term, _ in GLOSSARY}


def css_class(word: str) -> str:
    """The HTML class of a word (``fails loudly`` -> ``v-fails-loudly``)."""
    return "v-" + word.replace("/", "").replace(" ", "-")


def css_rules() -> str:
    """One CSS rule per word: its colour as a cell background, and its text colour."""
    return " ".join(f".{css_class(w)} {{ background: {COLOURS[w]}; color: {TEXT_COLOURS[w]}; }}" for w in WORDS)
