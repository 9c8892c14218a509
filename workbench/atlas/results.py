"""The atlas as the notebook and ``workbench atlas`` show it, and the history across releases, each
computed once per content of its inputs (``result_cache``): every setting's row, the summary per
backend x release x mode, and (unless skipped) each summary row run again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pandas as pd  # type: ignore[import-untyped]

from workbench.analysis.executors import Executor
from workbench.analysis.memory import ModelPreset
from workbench.atlas.history import history
from workbench.atlas.result_cache import cached_frames
from workbench.atlas.rows import case_backend_rows, confirm_by_runs, run_atlas, summarize


def atlas_results(engines: Sequence[str] | None = None, *, presets: Sequence[ModelPreset] | None = None,
                  overshoot: int | None = None, device: str = "cpu", confirm_runs: bool = True,
                  executor: Executor | None = None,
                  note: Callable[[str], None] = print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every setting's row, the summary). With no engines chosen, vLLM's case backends are rows too
    (``case_backend_rows``); ``confirm_runs`` runs every summary row again (``confirm_by_runs``).
    ``executor`` says where the settings' chunks run (``run_atlas``); it changes no row, so it is
    no part of the cached result's key."""

    def compute() -> dict[str, pd.DataFrame]:
        frame = run_atlas(list(engines) if engines else None, overshoot=overshoot, device=device, presets=presets,
                          executor=executor)
        if not engines:
            frame = pd.concat([frame, case_backend_rows(device)], ignore_index=True)
        summary = summarize(frame)
        return {"frame": frame, "summary": confirm_by_runs(summary) if confirm_runs else summary}

    arguments = {"engines": list(engines or ()), "presets": None if presets is None else [dataclasses.asdict(p) for p in presets],
                 "overshoot": overshoot, "device": device, "confirm_runs": confirm_runs}
    frames = cached_frames("atlas", arguments, compute, note)
    return frames["frame"], frames["summary"]


def history_results(engine: str = "sglang", *, overshoot: int | None = None, only: Sequence[str] = (),
                    note: Callable[[str], None] = print) -> pd.DataFrame:
    """``history`` once per content of its inputs."""
    arguments = {"engine": engine, "overshoot": overshoot, "only": list(only)}
    frames = cached_frames("history", arguments, lambda: {"history": history(engine, overshoot=overshoot, only=only)}, note)
    return frames["history"]
