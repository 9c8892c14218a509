"""Every plot returns a labelled figure with the traces and panels its frame calls for."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.analysis.cases import TableCase
from workbench.analysis.memory import load_presets, memory_table
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, request_trace, run_sweep
from workbench.model.geometry import Mode, ServingGeometry
from workbench.present.plots import exact_fit_map, failure_map, kv_budget_share, memory_overhead, request_trace_plot


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    grid = SweepGrid(context_lens=(40, 67), page_sizes=(1, 16), draft_tokens=(0, 3), replays=("dynamic",))
    return run_sweep(grid, cache_dir=None, progress=False)


def _labelled(fig: object) -> None:
    layout = fig.layout.to_plotly_json()  # type: ignore[attr-defined]
    assert layout["title"]["text"]
    for axis in ("xaxis", "yaxis"):
        titles = [v.get("title", {}).get("text") for k, v in layout.items() if k.startswith(axis)]
        assert any(titles), f"no {axis} title"


def test_failure_map_has_one_heatmap_per_mode_and_page_size(sweep: pd.DataFrame) -> None:
    fig = failure_map(sweep)
    assert [t.type for t in fig.data] == ["heatmap"] * 4  # 2 modes x 2 page sizes
    assert {a.text for a in fig.layout.annotations} == {"page_size=1", "page_size=16", "mode=decode", "mode=target-verify"}
    _labelled(fig)
    assert fig.layout.coloraxis.colorbar.title.text
    verify_ps1 = next(t for t in fig.data if t.name == "target-verify, ps=1")
    assert list(verify_ps1.x) == ["40", "67"]


def test_memory_overhead_is_log_scaled_per_rule(sweep: pd.DataFrame) -> None:
    fig = memory_overhead(sweep)
    assert fig.layout.yaxis.type == "log"
    assert {t.legendgroup for t in fig.data} == {
        f"{r}, {c}" for r in ("context", "context-plus-draft", "req-to-token") for c in ("npu-block-table", "dsa-page-table")}
    _labelled(fig)


def test_kv_budget_share_has_a_bar_trace_per_rule_and_component() -> None:
    fig = kv_budget_share(memory_table(load_presets()))
    assert len(fig.data) == 3 * 2 and {t.type for t in fig.data} == {"bar"}
    assert len(fig.data[0].x) == len(load_presets())
    _labelled(fig)


def test_exact_fit_map_facets_per_gather() -> None:
    frame = allocator_exact_fit_sweep(page_sizes=(4,), max_batch=3)
    fig = exact_fit_map(frame)
    outcomes_per_gather = frame.groupby("gather").outcome.nunique().sum()
    assert len(fig.data) == outcomes_per_gather + 3  # one pages-needed trace per panel
    assert {a.text for a in fig.layout.annotations} == {"gather=npu-legacy", "gather=npu-clamped", "gather=cuda-masked",
                                                        "page_size=4"}
    _labelled(fig)


def test_request_trace_plot_marks_failing_steps() -> None:
    geometry = ServingGeometry(context_len=256, page_size=64, draft_tokens=16)
    trace = request_trace(TableCase(component="npu-block-table", geometry=geometry, rule="context",
                                    mode=Mode.TARGET_VERIFY), steps=30)
    fig = request_trace_plot(trace)
    assert [t.name for t in fig.data][-1] == "step fails: shape-error"
    assert len(fig.data) == 4 and len(fig.data[-1].x) == 20  # s = 241 .. 260 fail
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
