"""``workbench history``: the seed fixes show where the releases' learned data change, and nowhere else.

Nothing in the history is typed in per release; these tests check that its transitions are the
learned files' own (the release at which a seed's reference deployment stops reaching a failure
is the release at which its learned rule or gather changes), and that the cells name the engine's
outcome at the seeds' own lengths (the worked numbers of docs/semantics.md: 32753, 90001, the exact-fit
decode's IndexError).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd  # type: ignore[import-untyped]
import pytest

from workbench.atlas.history import format_history, history, references
from workbench.engines.store import learned, startup_section
from workbench.engines.store.versions import load_versions

SEEDS = (("sglang-ascend-block-tables", "target-verify", "rule"), ("sglang-dsa-page-table", "target-verify", "rule"),
         ("allocator", "decode", "gather"))


@pytest.fixture(scope="module")
def past() -> pd.DataFrame:
    return history("sglang", only=[component for component, _, _ in SEEDS])


def _learned(release: str, component: str, field: str) -> object:
    version = load_versions().get(release)
    return None if version is None else version.fields.get(component, {}).get(field)


@pytest.mark.parametrize(("component", "mode", "field"), SEEDS)
def test_a_seed_fix_shows_where_the_learned_data_change(past: pd.DataFrame, component: str, mode: str,
                                                         field: str) -> None:
    rows = past[(past.backend == component) & (past["mode"] == mode) & (past.data_from == past.release)]
    rows = rows[rows.status.isin(["reachable", "unreachable", "safe"])]
    reached = list(rows.status == "reachable")
    assert True in reached and not reached[-1], rows[["release", "status"]]
    last = max(i for i, r in enumerate(reached) if r)  # the last release a run fails in
    assert not any(reached[last + 1:])  # once fixed, fixed
    before, after = rows.iloc[last].release, rows.iloc[last + 1].release
    assert _learned(before, component, field) != _learned(after, component, field), (before, after)


def test_the_cells_are_the_seeds_numbers(past: pd.DataFrame) -> None:
    ascend = past[(past.backend == "sglang-ascend-block-tables") & (past.rule == "context")
                  & (past["mode"] == "target-verify")]  # the seed's own mode
    assert set(ascend.first_failing.dropna()) == {32753} and set(ascend.outcome) == {"shape-error"}
    dsa = past[(past.backend == "sglang-dsa-page-table") & (past.rule == "context-plus-draft")
               & (past["mode"] == "target-verify")]
    assert set(dsa.first_failing.dropna()) == {90001}
    gathers = past[past.backend == "allocator"].dropna(subset=["outcome"])
    assert set(gathers.outcome) == {"index-error", "ok"}


def test_history_prints_runs_of_releases() -> None:
    out = subprocess.run([sys.executable, "-m", "workbench", "history", "--backend", "allocator"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("allocator decode (exact-fit decode, ps 4 (third seed)):")
    assert "index-error (reachable)" in out and " safe" in out
    lines = subprocess.run([sys.executable, "-m", "workbench", "history", "--backend", "allocator", "--json"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert {json.loads(line)["release"] for line in lines} >= {"sglang==0.5.10", "sglang==0.5.23"}


def _startup_answer(release: str, component: str, mode: str) -> str | None:
    """What ``release`` said, asked at start-up, of the reference deployment (its learned file), or None."""
    section = learned.section(release, startup_section.SECTION)
    reference = next(r for r in references() if (r.component, r.mode) == (component, mode))
    if section is None or component == "allocator":
        return None
    settings = {"spec_steps": 1, "spec_topk": 1, "draft_tokens": 0, "draft_has_kv": True, **reference.settings}
    recipe = startup_section.recipe_word(settings["draft_tokens"], settings["spec_steps"], settings["spec_topk"],
                                       settings["draft_has_kv"])
    said = section["settings"]["value"].get(component, {}).get(recipe, {}).get(str(settings["page_size"]))
    return str(said) if said is not None else None


def test_a_release_that_refuses_the_deployment_at_start_up_says_so(past: pd.DataFrame) -> None:
    """0.5.23's own start-up checks refuse NGRAM on an NPU (its learned startup section): the first
    seed's deployment under it is "refused at start-up" with the engine's message, not a boundary."""
    refused = 0
    for row in past.to_dict("records"):
        learned_from = row["data_from"]  # None: the release was not learned
        said = _startup_answer(learned_from, str(row["backend"]), str(row["mode"])) \
            if isinstance(learned_from, str) else None
        if said is not None and said.startswith("refused: "):
            refused += 1
            assert row["status"] == "refused" and row["startup_refusal"] == said.removeprefix("refused: "), row
            assert pd.isna(row.get("first_failing")), row
        else:
            assert row["status"] != "refused", row
    seed = _startup_answer("sglang==0.5.23", "sglang-ascend-block-tables", "target-verify")
    assert seed is not None and seed.startswith("refused: Ngram") and refused >= 1
    text = format_history(past[past.backend == "sglang-ascend-block-tables"])
    assert "0.5.23 refused at start-up" in text and seed.removeprefix("refused: ") in text
