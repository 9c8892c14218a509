"""Expensive, deterministic results kept by the content they come from (``atlas/result_cache.py``):
computed once, reused while nothing they read changed, computed afresh when anything did."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from workbench.atlas import result_cache


@pytest.fixture()
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder and a data folder of this test's own (the package's source stays the real one)."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(result_cache.OFF_ENV, raising=False)
    data = tmp_path / "data"
    (data / "engines").mkdir(parents=True)
    (data / "presets.json").write_text('{"a": 1}\n')
    monkeypatch.setattr(result_cache, "DATA", data)
    return data


def _counting() -> tuple[list[int], object]:
    calls: list[int] = []

    def compute() -> dict[str, pd.DataFrame]:
        calls.append(1)
        return {"rows": pd.DataFrame({"x": [len(calls), 2], "y": ["a", None]}).astype({"x": "Int64"})}

    return calls, compute


def test_computed_once_then_reused_with_the_same_frames(inputs: Path) -> None:
    calls, compute = _counting()
    notes: list[str] = []
    first = result_cache.cached_frames("thing", {"k": 1}, compute, notes.append)  # type: ignore[arg-type]
    again = result_cache.cached_frames("thing", {"k": 1}, compute, notes.append)  # type: ignore[arg-type]
    assert calls == [1]
    pd.testing.assert_frame_equal(first["rows"], again["rows"])
    assert notes[0].startswith("thing: computed in ") and notes[1].startswith("thing: reused the cached result")


def test_any_changed_input_computes_afresh(inputs: Path) -> None:
    calls, compute = _counting()
    run = lambda arguments: result_cache.cached_frames("thing", arguments, compute, lambda _: None)  # type: ignore[arg-type]  # noqa: E731
    run({"k": 1})
    run({"k": 2})  # another call
    assert len(calls) == 2
    (inputs / "presets.json").write_text('{"a": 2}\n')  # a data file's content
    run({"k": 1})
    assert len(calls) == 3
    (inputs / "engines" / "sglang").mkdir()
    (inputs / "engines" / "sglang" / "0.5.99.json").write_text("{}\n")  # a release learned
    run({"k": 1})
    assert len(calls) == 4
    run({"k": 1})
    assert len(calls) == 4


def test_a_release_learned_on_this_machine_is_an_input(inputs: Path) -> None:
    calls, compute = _counting()
    run = lambda: result_cache.cached_frames("thing", {}, compute, lambda _: None)  # type: ignore[arg-type]  # noqa: E731
    run()
    learned = result_cache.learned_cache_dir() / "sglang" / "0.5.23.json"
    learned.parent.mkdir(parents=True)
    learned.write_text("{}\n")
    run()
    assert len(calls) == 2


def test_a_data_folder_sweep_checkpoint_is_no_input(inputs: Path) -> None:
    calls, compute = _counting()
    run = lambda: result_cache.cached_frames("thing", {}, compute, lambda _: None)  # type: ignore[arg-type]  # noqa: E731
    run()
    (inputs / "cache").mkdir()
    (inputs / "cache" / "sweep-123.parquet").write_bytes(b"\0")
    run()
    assert len(calls) == 1


def test_off_computes_every_time_and_stores_nothing(inputs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(result_cache.OFF_ENV, "0")
    calls, compute = _counting()
    notes: list[str] = []
    for _ in range(2):
        result_cache.cached_frames("thing", {}, compute, notes.append)  # type: ignore[arg-type]
    assert len(calls) == 2 and "the result cache is off" in notes[0]
    assert not result_cache.cache_folder().exists()


def test_an_unreadable_entry_is_computed_again(inputs: Path) -> None:
    calls, compute = _counting()
    result_cache.cached_frames("thing", {}, compute, lambda _: None)  # type: ignore[arg-type]
    for entry in result_cache.cache_folder().glob("thing-*.pkl"):
        entry.write_bytes(b"not a pickle")
    notes: list[str] = []
    result_cache.cached_frames("thing", {}, compute, notes.append)  # type: ignore[arg-type]
    assert len(calls) == 2 and "could not be read" in notes[0]


@pytest.mark.engine
def test_the_cached_atlas_is_the_atlas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One release's atlas through the cache, computed and then loaded, against the atlas computed
    directly by its own functions."""
    from workbench.analysis.memory import load_presets
    from workbench.atlas.results import atlas_results
    from workbench.atlas.rows import confirm_by_runs, run_atlas, summarize

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    presets = [p for p in load_presets() if p.name == "QwQ-32B"]
    notes: list[str] = []
    computed = atlas_results(["sglang==0.5.23"], presets=presets, note=notes.append)
    loaded = atlas_results(["sglang==0.5.23"], presets=presets, note=notes.append)
    direct_frame = run_atlas(["sglang==0.5.23"], presets=presets)
    direct_summary = confirm_by_runs(summarize(direct_frame))
    for got in (computed, loaded):
        pd.testing.assert_frame_equal(got[0], direct_frame)
        pd.testing.assert_frame_equal(got[1], direct_summary)
    assert "computed" in notes[0] and "reused" in notes[1]
