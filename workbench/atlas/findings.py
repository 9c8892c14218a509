"""Atlas rows -> findings: what a reviewer acts on, one per backend, release and mode a real run can break.

``findings(summary)`` reads the atlas's summary (``workbench.atlas.rows.summarize``: one row per
backend, engine release and mode, its worst setting) and keeps the rows a real run reaches
(``status == "reachable"``). Each finding carries what the row says, never a typed number: how it
fails (loud: the step raises; silent: nothing raises, a kernel reads or writes past the buffer), the
first failing committed length and how far a run gets, the conditions of the worst setting as far
as the row names them (model preset, speculative recipe, context length, page size, draft tokens,
batch, KV pool tokens; a column the atlas adds later joins them by being listed in
``CONDITIONS``), and the fix: the first later release of the same engine whose row a run no longer
breaks, and the bytes a safe size takes over the release's own (``extra_bytes``, and its share of
the setting's KV cache).

Worked example (QwQ-32B on SGLang 0.5.23, FA3, page size 1, own recipe NGRAM D 16): the verify
reads past the page table from ``s = 32768 - 16 + 1 = 32753``; a run reaches ``ctx - 1 + 2 =
32769``; nothing raises, so the finding is silent, with margin -17 and the safe width's bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd  # type: ignore[import-untyped]

from workbench.engines.store.releases import version_key
from workbench.model.outcome import Outcome

# (column, label) of the conditions a finding names, in the order shown; absent or empty ones are left out.
# (The recipe names the drafter's steps and topk: ``eagle-5-4-8`` is 5 steps, topk 4, D 8.)
CONDITIONS = (
    ("preset", "model"), ("recipe", "recipe"), ("context_len", "ctx"), ("page_size", "ps"),
    ("draft_tokens", "D"), ("batch", "batch"), ("pool_tokens", "pool"), ("scan_field", "scanned"),
)
# Nothing raises: a kernel reads past the buffer, or a replay writes past a row. Every other failure raises.
SILENT_OUTCOMES = (Outcome.SILENT_OVERREAD.value, Outcome.SILENT_OVERWRITE.value)
_RELEASE = re.compile(r"^(\d+(?:\.\d+)*)")


def release_key(engine: str) -> tuple[str, tuple[tuple[int, ...], int, int, int], str]:
    """``sglang==0.5.14+dsa-width-w`` -> ``("sglang", version_key("0.5.14"), "+dsa-width-w")``: releases
    in the package index's order (``releases.version_key``: ``0.5.0rc2`` before ``0.5.0``, ``0.5.1``
    before ``0.5.1.post3``), a pseudo-version (a release with one change, ``+...``) right after the
    release it patches; a version of no such form sorts by its leading numbers."""
    name, _, version = engine.partition("==")
    release, plus, local = version.partition("+")
    try:
        key = version_key(release)
    except ValueError:
        match = _RELEASE.match(release)
        key = (tuple(int(n) for n in match.group(1).split(".")) if match else (), 3, 0, -1)
    return name, key, plus + local


def is_release(engine: str) -> bool:
    """A released version (``NAME==X.Y.Z``), not a pseudo-version (``+...``) nor a bare engine name."""
    name, _, version = engine.partition("==")
    return bool(name and version and "+" not in version and _RELEASE.match(version))


def releases_of(summary: pd.DataFrame) -> list[str]:
    """Every engine version of the summary: engines by name, each oldest first."""
    return sorted(set(summary["engine"]), key=release_key)


def release_under_review(summary: pd.DataFrame) -> str:
    """The newest release of the engine with the most rows (SGLang): what the report opens with."""
    engines = summary[summary["engine"].map(is_release)]["engine"]
    if engines.empty:
        raise ValueError("the atlas summary names no released engine version")
    family = engines.map(lambda e: e.partition("==")[0]).value_counts().index[0]
    same = [e for e in set(engines) if e.partition("==")[0] == family]
    return str(max(same, key=release_key))


@dataclass(frozen=True)
class Finding:
    """One backend, release and mode that a real run breaks, as its worst setting shows it."""

    release: str
    backend: str
    mode: str
    rule: str
    outcome: str  # the executed step's outcome, e.g. "silent-overread"
    silent: bool  # nothing raises (``SILENT_OUTCOMES``); else the step raises: loud
    first_failing: int
    reachable: int  # the longest committed length a run reaches in that setting
    margin: int
    conditions: dict[str, object] = field(default_factory=dict)  # label -> value, in ``CONDITIONS`` order
    settings_reaching: int | None = None  # how many of the row's settings a run breaks
    settings: int | None = None  # how many settings the atlas ran for the row
    fixed_in: str | None = None  # the first later release of the engine that a run no longer breaks here
    extra_bytes: int | None = None  # what a safe size takes over the release's own, in that setting
    extra_share_of_kv: float | None = None
    confirmed: bool | None = None  # the row run again (a serving run, a batch walk) hit the failure
    latent: str = ""  # why no released setting launches this step, and what would reach it ("" for a deployment)


def _value(row: pd.Series, column: str) -> object | None:
    value = row.get(column)
    if value is None or (not isinstance(value, str) and pd.isna(value)) or value == "":
        return None
    plain: object = value.item() if hasattr(value, "item") else value
    if isinstance(plain, float) and plain.is_integer():
        return int(plain)  # a column with gaps (the vLLM rows have no page size) holds floats
    return plain


def conditions_of(row: pd.Series) -> dict[str, object]:
    """The worst setting's conditions the row names, label -> value."""
    return {label: value for column, label in CONDITIONS if (value := _value(row, column)) is not None}


def _fixed_in(summary: pd.DataFrame, row: pd.Series) -> str | None:
    """The first release after ``row``'s, of the same engine, with a row for the same backend and mode
    that a run does not break; None when every later release with such a row still breaks. A release
    that refuses every setting there at start-up fixes nothing (no run of it says so): it is passed over."""
    name = str(row["engine"]).partition("==")[0]
    later = summary[(summary["backend"] == row["backend"]) & (summary["mode"] == row["mode"])
                    & summary["engine"].map(lambda e: is_release(e) and e.partition("==")[0] == name)
                    & summary["engine"].map(lambda e: release_key(e) > release_key(str(row["engine"])))]
    for _, candidate in sorted(later.iterrows(), key=lambda item: release_key(str(item[1]["engine"]))):
        if candidate["status"] not in ("reachable", "refused"):
            return str(candidate["engine"])
    return None


def _count(row: pd.Series, column: str) -> int | None:
    value = _value(row, column)
    return int(value) if isinstance(value, (int, float)) else None


# A failing row whose step no deployment of its recipe runs: the atlas puts every mode of a backend
# under every recipe, and the engine builds fewer. A speculative launch replays the target verify and,
# with a draft model, the drafter's graphs; ``workbench check`` runs those modes for such a launch.
DECODE_UNDER_SPECULATION = (
    "a speculative deployment replays no plain decode graph for its target (its decode step is the target "
    "verify), and without speculation a request stops at the scheduler's cap (ctx - 1), short of this length: "
    "what would reach it is a decode-graph step that carries a request past ctx - 1, which only speculative "
    "acceptance does, in a release that replayed the plain decode graph in a speculative run")
NO_DRAFTER = (
    "the recipe keeps no draft model (NGRAM proposes from the request's own tokens), so no deployment of it runs "
    "a {mode} step: what would reach it is an EAGLE-family deployment (a draft model keeping KV) at the same "
    "context and page size, whose own first failing length `workbench check` gives for its launch")


def latent_reason(mode: str, draft_tokens: int, draft_has_kv: bool) -> str:
    """Why no released setting of the row's recipe runs ``mode`` (and what would), or "" when one does."""
    speculative = draft_tokens > 0
    if mode == "decode" and speculative:
        return DECODE_UNDER_SPECULATION
    if mode.startswith("draft-") and speculative and not draft_has_kv:
        return NO_DRAFTER.format(mode=mode)
    return ""


def row_latent(row: pd.Series) -> str:
    draft = _value(row, "draft_tokens")
    return latent_reason(str(row["mode"]), int(draft) if isinstance(draft, (int, float)) else 0,
                         bool(_value(row, "draft_has_kv")))


def finding_of(summary: pd.DataFrame, row: pd.Series) -> Finding:
    """One reachable summary row as a finding (``summary`` gives the later releases, for the fix)."""
    settings = [_count(row, f"settings_{status}") for status in ("reachable", "unreachable", "safe")]
    confirmed = _value(row, "run_confirmed")
    extra = _value(row, "extra_bytes")
    share = _value(row, "extra_share_of_kv")
    return Finding(
        release=str(row["engine"]), backend=str(row["backend"]), mode=str(row["mode"]), rule=str(row["rule"]),
        outcome=str(row["outcome"]), silent=str(row["outcome"]) in SILENT_OUTCOMES,
        first_failing=int(row["first_failing_seq_len"]), reachable=int(row["reachable_len"]), margin=int(row["margin"]),
        conditions=conditions_of(row), settings_reaching=settings[0],
        settings=sum(s for s in settings if s is not None) if any(s is not None for s in settings) else None,
        fixed_in=_fixed_in(summary, row),
        extra_bytes=int(extra) if isinstance(extra, (int, float)) else None,
        extra_share_of_kv=float(share) if isinstance(share, (int, float)) else None,
        confirmed=bool(confirmed) if confirmed is not None else None, latent=row_latent(row),
    )


def findings(summary: pd.DataFrame, releases: Iterable[str] | None = None, *, latent: bool = False) -> list[Finding]:
    """Every reachable row of ``summary`` (of ``releases``, default all) whose step a deployment of its
    recipe runs, as a finding: releases in order, then backend, then mode as the summary lists them.
    ``latent``: instead, the reachable rows no released setting launches (``Finding.latent`` says why)."""
    chosen = set(releases) if releases is not None else None
    rows = summary[summary["status"] == "reachable"]
    if chosen is not None:
        rows = rows[rows["engine"].isin(chosen)]
    order = sorted(rows.index, key=lambda i: (release_key(str(rows.at[i, "engine"])), str(rows.at[i, "backend"])))
    return [f for f in (finding_of(summary, rows.loc[i]) for i in order) if bool(f.latent) == latent]


def past_reach(summary: pd.DataFrame, release: str) -> pd.DataFrame:
    """The release's rows that fail only past what a run reaches (a margin, not a crash)."""
    return summary[(summary["engine"] == release) & (summary["status"] == "unreachable")]
