"""The atlas's fast path gives the rows the plain computation gives, and a release whose learned data
changed executes only the table states no other release already had.

The plain computation (the atlas before ``atlas.reaches`` and ``atlas.boundaries``): every reach from
``analysis.reach.default_reach`` (each call reads the release's rule afresh), every state's boundary
from ``analysis.boundary.fast_boundaries`` (the closed form confirmed by executing both sides)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import pytest

from workbench.analysis.boundary import fast_boundaries
from workbench.analysis.executors import Executor
from workbench.analysis.memory import load_presets
from workbench.analysis.reach import default_reach
from workbench.atlas import boundaries, reaches, rows
from workbench.engines.store import learned
from workbench.engines.store.versions import load_versions
from workbench.model.cases import TableCase
from workbench.model.geometry import Mode, ServingGeometry

ENGINES = ["sglang==0.5.22", "sglang==0.5.23"]
SERIAL = Executor(kind="serial")


def _presets() -> list[Any]:
    """Two presets, one with MLA and one without (the pooled buffers of each attention kind)."""
    presets = load_presets()
    mla = next(p for p in presets if p.kv_lora_rank is not None)
    mha = next(p for p in presets if p.kv_lora_rank is None)
    return [mla, mha]


def _plain_reach(self: reaches.Reaches, engine: str, g: ServingGeometry, mode: Mode, step_id: int = 0,
                 algorithm: str | None = None) -> Any:
    return default_reach(engine, g, mode, step_id, algorithm=algorithm, overshoot=self.overshoot)


def _plain_execute(cases: list[TableCase], device: str, confirm: bool = False) -> list[boundaries.Found]:
    return [boundaries.Found(b.first_failing_seq_len, b.failing, True) for b in fast_boundaries(cases, device=device)]


def test_the_fast_atlas_gives_the_plain_computations_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    presets = _presets()[:1]  # the plain computation reads every rule afresh for every row: minutes otherwise
    fast = rows.run_atlas(ENGINES, presets=presets, executor=SERIAL)
    fast_summary = rows.summarize(fast)
    monkeypatch.setenv("WORKBENCH_RESULT_CACHE", "0")  # nothing kept: every state executed both sides
    monkeypatch.setattr(reaches.Reaches, "at", _plain_reach)
    monkeypatch.setattr(rows, "execute", _plain_execute)
    plain = rows.run_atlas(ENGINES, presets=presets, executor=SERIAL)
    assert len(plain) > 100 and set(plain.status) >= {"reachable", "safe"}
    pd.testing.assert_frame_equal(fast, plain, check_exact=True)
    assert fast.to_csv() == plain.to_csv()
    pd.testing.assert_frame_equal(fast_summary, rows.summarize(plain), check_exact=True)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[bool, list[TableCase]]:
    """The states executed, by ``confirm``: failing step only (False), both sides (True)."""
    executed: dict[bool, list[TableCase]] = {False: [], True: []}
    real = boundaries.execute

    def execute(cases: list[TableCase], device: str, confirm: bool = False) -> list[boundaries.Found]:
        executed[confirm].extend(cases)
        return real(cases, device, confirm)

    monkeypatch.setattr(rows, "execute", execute)
    return executed


def _started_cases(engine: str, presets: list[Any]) -> set[TableCase]:
    return {c.case for c in rows.configurations([engine], presets, with_refused=True) if c.started_by}


def test_a_changed_release_executes_only_its_new_states(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    load_versions.cache_clear()
    presets = _presets()
    executed = _counting(monkeypatch)
    first = rows.run_atlas(ENGINES, presets=presets, executor=SERIAL)
    before = _started_cases(ENGINES[0], presets) | _started_cases(ENGINES[1], presets)
    assert sorted(map(repr, executed[False])) == sorted(map(repr, before))  # the first time: each state once
    assert 0 < len(executed[True]) < len(before)  # and the summary's states on both sides
    executed[False].clear()
    executed[True].clear()
    again = rows.run_atlas(ENGINES, presets=presets, executor=SERIAL)
    assert executed == {False: [], True: []}  # nothing changed: every state kept
    pd.testing.assert_frame_equal(first, again, check_exact=True)

    # 0.5.23's learned file, as a user's relearning would leave it: FA3 sized by the request table's width
    changed = ENGINES[1]
    data = json.loads(learned.shipped_path(changed).read_text())
    data["sections"]["buffers"]["backends"]["sglang-fa3-page-table"]["rule"]["value"] = "req-to-token"
    target = learned.shipped_path(changed, learned.cache_dir())
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data))
    load_versions.cache_clear()  # the versions are read once per process: read the changed file
    request.addfinalizer(load_versions.cache_clear)  # and not kept past this test's cache folder
    new_states = _started_cases(changed, presets) - before
    assert new_states and all(c.component == "sglang-fa3-page-table" for c in new_states)
    third = rows.run_atlas(ENGINES, presets=presets, executor=SERIAL)
    # only the states no release had before are executed, each once; the summary's new worst rows confirmed
    assert sorted(map(repr, executed[False])) == sorted(map(repr, new_states))
    shown = rows.summarize(third)
    assert len(executed[True]) <= len(shown[shown.engine == changed])
    # the unchanged release's rows are the same; the changed one's FA3 rows name the new rule
    kept = third[third.engine == ENGINES[0]].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first[first.engine == ENGINES[0]].reset_index(drop=True), check_exact=True)
    fa3 = third[(third.engine == changed) & (third.backend == "sglang-fa3-page-table")]
    assert len(fa3) and set(fa3.rule) == {"req-to-token"}
