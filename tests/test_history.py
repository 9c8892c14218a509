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

from workbench.analysis.history import history
from workbench.engines.versions import load_versions

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
